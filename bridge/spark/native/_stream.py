"""Micro-batches of file-tier streams as Spark's own scans (the JVM `ChangelogSource`).

The dts extension replaces a `readStream.format("dts").option("tier", "file")` with a
JVM streaming source whose offsets and micro-batches this module plans in the driver's
Python process (called back through Py4J, see `bridge.spark.native.extension`). Offsets,
admission control and Trigger.AvailableNow are the Python source's own
(`FileStreamReader`), so a checkpoint written by either path is read by the other.
A micro-batch is:

- snapshots with stored changelog: Spark's Parquet scan of their files
  (`native.changes`), columns pruned and filters pushed by Spark, as many snapshots as
  the admission limit allows (all by default), so a stream behind its source catches up
  in one batch. One snapshot's changes of a key are in one file, read whole by one task
  (no file Spark would split is admitted). When a batch spans several snapshots and the
  query's sink upserts (the JVM source asks for `key_order`, see `SinkOrder.java`), they
  are hash-partitioned by key and sorted in commit order within partitions, so each
  key's changes reach the sink in order; a query that aggregates the stream, or writes
  to Spark's noop or file sinks, skips that shuffle and gets the rows unordered across
  snapshots (each carries its snapshot's `_barrier`);
- the first batch of `scan.mode=latest-full`: the snapshot as `dts.table` reads it, +I;
- a snapshot without stored changelog (an OVERWRITE), or with a changelog file larger
  than `spark.sql.files.maxPartitionBytes`: the Python source's ordered changes read,
  one snapshot per batch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    ReadMaxRows,
)
from pyspark.sql.types import StructType

from bridge.spark.native.scan import changelog_files_read_natively
from bridge.spark.native.scan import changes as native_changes
from bridge.spark.native.scan import table as native_table
from bridge.spark.options import BARRIER, ROW_KIND, ReadOptions
from bridge.spark.options.catalog import open_table
from bridge.spark.options.habits import CHANGE_TYPE
from bridge.spark.options.keys import session_defaults
from bridge.spark.stream.by_tier import stream_reader
from bridge.spark.stream.file import FileStreamReader
from bridge.spark.stream.limits import default_read_limit
from bridge.spark.stream.offsets import FileOffset
from filestore.errors import SnapshotNotFound

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from filestore.read.changes import StoredChange

NATIVE_STREAMS_CONF = "spark.dts.native-streams"


def _dumps(offset: dict[str, Any]) -> str:
    return json.dumps(offset, sort_keys=True)


def parse_limit(text: str) -> ReadLimit:
    """The JVM's admission string (see `describe`) back to Spark's ReadLimit."""
    kind, _, n = text.partition(":")
    if kind == "rows":
        return ReadMaxRows(int(n))
    if kind == "barriers":
        return ReadMaxFiles(int(n))
    return ReadAllAvailable()


def describe(limit: ReadLimit) -> str:
    if isinstance(limit, ReadMaxRows):
        return f"rows:{limit.max_rows}"
    if isinstance(limit, ReadMaxFiles):
        return f"barriers:{limit.max_files}"
    return "all"


@dataclass
class _Stream:
    opts: ReadOptions
    schema: StructType
    reader: FileStreamReader
    initial: str
    # the stored changelog files latest_offset found for (start, end]; the batch of that
    # range then reads no manifest again
    planned: tuple[int, int, list[StoredChange]] | None = None


class NativeStreams:
    """The streams of one session, by the source id (its checkpoint path)."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._streams: dict[str, _Stream] = {}

    def open(self, source_id: str, options: Any, schema_json: str) -> None:
        given = {str(k): str(v) for k, v in options.items()}
        opts = ReadOptions.parse({**session_defaults(self._spark), **given})
        schema = StructType.fromJson(json.loads(schema_json))
        reader = stream_reader(opts, schema)  # the Python source's own checks
        assert isinstance(reader, FileStreamReader)  # NativeStreamRule takes tier=file only
        self._streams[source_id] = _Stream(opts, schema, reader, _dumps(reader.initialOffset()))

    def initial_offset(self, source_id: str) -> str:
        return self._streams[source_id].initial

    def default_read_limit(self, source_id: str) -> str:
        return describe(default_read_limit(self._streams[source_id].opts))

    def latest_offset(self, source_id: str, start: str, limit: str) -> str:
        """Every snapshot the limit admits when Spark's scan reads their stored changelog
        (the batch then brings each key's changes to one task in commit order, see
        `native.changes`); else one snapshot, read in order by the Python source. A stream
        behind its source catches up in one batch instead of one snapshot per trigger."""
        s = self._streams[source_id]
        begin = json.loads(start)
        end = s.reader.latestOffset(begin, parse_limit(limit))
        a, b = FileOffset.from_json(begin), FileOffset.from_json(end)
        if not a.full and b.snapshot - a.snapshot > 1:
            table = open_table(s.opts.common.warehouse, s.opts.common.table)
            files = changelog_files_read_natively(table, a.snapshot, b.snapshot, self._split_at())
            if files is None:
                end = s.reader.latestOffset(begin, ReadMaxFiles(1))
            else:
                s.planned = (a.snapshot, b.snapshot, files)
        return _dumps(end)

    def _split_at(self) -> int:
        """Spark splits files larger than this between tasks (a -U and its +U apart)."""
        return int(self._spark._jsparkSession.sessionState().conf().filesMaxPartitionBytes())

    def prepare_available_now(self, source_id: str) -> None:
        self._streams[source_id].reader.prepareForTriggerAvailableNow()

    def stop(self, source_id: str) -> None:
        self._streams.pop(source_id, None)

    def batch(self, source_id: str, start: str, end: str, key_order: bool = True) -> Any:
        """The analyzed plan of the rows in (start, end], in the stream schema's order;
        with `key_order`, each key's changes in one task in commit order."""
        s = self._streams[source_id]
        a, b = FileOffset.from_json(json.loads(start)), FileOffset.from_json(json.loads(end))
        names = s.schema.fieldNames()
        try:
            if b.snapshot <= a.snapshot:
                df = self._spark.createDataFrame([], s.schema)
            elif a.full:
                df = self._full(s, b)
            else:
                df = self._changes(s, a.snapshot, b.snapshot, key_order)
        except SnapshotNotFound as exc:  # a batch planned before, run again after a restart
            table = open_table(s.opts.common.warehouse, s.opts.common.table)
            raise s.reader.expired(a.snapshot, table.snapshot_manager.earliest_id()) from exc
        return df.select(*[F.col(f"`{n}`") for n in names])._jdf.queryExecution().analyzed()

    def _full(self, s: _Stream, end: FileOffset) -> Any:
        """The first batch of latest-full: snapshot `end` in full, as +I of its barrier."""
        o = s.opts.common
        df = native_table(self._spark, o.table, warehouse=o.warehouse, snapshot_id=end.snapshot)
        barrier = open_table(o.warehouse, o.table).snapshot(end.snapshot).barrier
        df = df.withColumn(ROW_KIND, F.lit("+I")).withColumn(BARRIER, F.lit(barrier).cast("bigint"))
        if CHANGE_TYPE in s.schema.fieldNames():
            df = df.withColumn(CHANGE_TYPE, F.lit("insert"))
        return df

    def _changes(self, s: _Stream, start: int, end: int, key_order: bool) -> Any:
        o = s.opts.common
        feed = CHANGE_TYPE in s.schema.fieldNames()
        table = open_table(o.warehouse, o.table)
        planned = s.planned
        files = planned[2] if planned is not None and planned[:2] == (start, end) else None
        df = native_changes(
            self._spark, o.warehouse, table, start, end, feed,
            max_file_bytes=self._split_at(), key_order=key_order, files=files,
        )  # fmt: skip
        if df is not None:
            return df
        # in order, by the Python source (not re-planned natively by the extension)
        reader = self._spark.read.format("dts").option("warehouse", o.warehouse)
        reader = reader.option("scan.native", "false")
        if feed:
            reader = reader.option("readChangeFeed", "true")
            reader = reader.option("startingVersion", str(start + 1))
            reader = reader.option("endingVersion", str(end))
        else:
            reader = reader.option("changes", f"{start},{end}")
        return reader.load(o.table)
