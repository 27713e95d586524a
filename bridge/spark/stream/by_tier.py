"""Choosing the `dts` stream reader for `option("tier", ...)`, and reporting set-up errors."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import StructType

from bridge.spark.errors import OptionError
from bridge.spark.options import BARRIER, ROW_KIND, ReadOptions
from bridge.spark.stream._hybrid import HybridStreamReader
from bridge.spark.stream._log import LogStreamReader
from bridge.spark.stream.file import FileStreamReader


def stream_reader(opts: ReadOptions, schema: StructType) -> DataSourceStreamReader:
    """The stream reader for `opts.tier`."""
    if opts.tier is None:
        raise OptionError('streaming reads of dts need .option("tier", "file" | "log" | "hybrid")')
    missing = [c for c in (ROW_KIND, BARRIER) if c not in schema.fieldNames()]
    if missing:
        raise OptionError(f"a streaming dts schema must keep the metadata columns {missing}")
    if opts.tier == "file":
        return FileStreamReader(opts, schema)
    if opts.tier == "log":
        return LogStreamReader(opts, schema)
    return HybridStreamReader(opts, schema)


class FailedStreamReader(DataSourceStreamReader):
    """Stands in for a stream reader whose set-up failed: raises that error on first use."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def initialOffset(self) -> dict[str, Any]:
        raise self.error

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        raise self.error

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raise self.error

    def commit(self, end: dict[str, Any]) -> None:
        return None

    def stop(self) -> None:
        return None
