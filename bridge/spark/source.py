"""The `dts` Python data source: its schema, batch reads (time travel, changelog reads),
and the writers and stream readers it hands out (`write.sink`, `stream.by_tier`).

Planning happens here and in `read.plan_scan` / `read.plan_log` (driver side); reading in
`read.scan` / `read.log` (executors); writing in `write._tasks` (executors) committed by
`write.sink` / `write.staged` (driver).

Where code runs (PySpark 4.3): `DataSource.schema/reader/writer/streamReader`
and `DataSourceReader.pushFilters/partitions` run in short-lived Python
workers on the driver during planning; `read()` runs in executor Python
workers, one call per partition; a stream reader lives in one long-lived
driver-side worker for the whole query (so it may keep caches between
`latestOffset` calls); a writer's `commit`/`abort` run in a fresh driver-side
worker with the pickled writer (batch) or a fresh `streamWriter()` (streaming).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader
from pyspark.sql.types import StructType

from bridge.spark.errors import OptionError
from bridge.spark.options import METADATA_COLUMNS, ReadOptions, WriteOptions
from bridge.spark.options.catalog import open_table
from bridge.spark.options.habits import CHANGE_TYPE
from bridge.spark.options.schema import spark_schema
from bridge.spark.read.batch import DtsBatchReader
from bridge.spark.stream.by_tier import FailedStreamReader, stream_reader
from bridge.spark.write.sink import DtsStreamWriter, batch_writer


class DtsDataSource(DataSource):
    """`spark.read.format("dts").option("warehouse", W).load("db.table")` and friends.

    `defaults` are options every read and write of this registration gets unless it gives
    them itself: the `spark.dts.*` session confs (see `bridge.spark.registration`), and for a
    table registered by name also its warehouse and name (Spark hands a catalog table's
    source no options at all).
    """

    defaults: dict[str, str] = {}  # replaced per registration (a subclass), never mutated

    def __init__(self, options: Any) -> None:
        merged = type(options)() if hasattr(options, "copy") else {}
        for k, v in self.defaults.items():
            merged[k] = v
        for k, v in options.items():
            merged[k] = v
        super().__init__(merged)

    @classmethod
    def name(cls) -> str:
        return "dts"

    def schema(self) -> StructType:
        opts = ReadOptions.parse(self.options)
        table = open_table(opts.common.warehouse, opts.common.table)
        struct = spark_schema(
            table.schema.arrow_schema,
            metadata_columns=opts.wants_metadata,
            change_type=opts.feed is not None,
        )
        if opts.columns:
            missing = [c for c in opts.columns if c not in struct.fieldNames()]
            if missing:
                raise OptionError(f"option 'columns': unknown columns {missing} in {table.name}")
            keep = set(opts.columns) | {*METADATA_COLUMNS, CHANGE_TYPE}
            struct = StructType([f for f in struct.fields if f.name in keep])
        return struct

    def reader(self, schema: StructType) -> DataSourceReader:
        return DtsBatchReader(ReadOptions.parse(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        return batch_writer(WriteOptions.parse(self.options), schema, overwrite)

    def streamReader(self, schema: StructType) -> Any:
        try:
            return stream_reader(ReadOptions.parse(self.options), schema)
        except Exception as e:
            # PySpark's stream runner calls `reader.stop()` in a `finally` even when this
            # raised, so the error would surface as an UnboundLocalError with ours buried
            # in its chain; a reader that raises ours on first use reports it as it is
            return FailedStreamReader(e)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        return DtsStreamWriter(WriteOptions.parse(self.options), schema, overwrite)
