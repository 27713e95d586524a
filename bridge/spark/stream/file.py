"""Streaming read of the FileStore tier: one micro-batch covers whole snapshots (whole barriers).

scan.mode (where the stream starts; the first snapshot *after* the start offset is read next):
- `latest-full` (default): the current snapshot in full as +I, then each new snapshot's changes;
- `latest`: only changes committed after the query started;
- `from-snapshot` (`scan.snapshot-id` = X): changes of snapshot X and later;
- `from-barrier` (`scan.barrier` = B): changes of barriers after B (pair it with a batch read
  `option("barrier", B)` for the state at B);
- `from-timestamp` (`scan.timestamp-millis` = ms): changes committed after that time.

Admission control: `maxRowsPerTrigger` (soft: whole snapshots, at least one, by their
record counts) and `maxBarriersPerTrigger` (snapshots per batch, exposed to Spark as
`ReadMaxFiles`); `Trigger.AvailableNow` stops at the snapshot that was latest when the
query started.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from bridge.spark.errors import SnapshotsExpired
from bridge.spark.options import ReadOptions
from bridge.spark.options.catalog import open_table
from bridge.spark.read.plan_scan import changes_partitions, read_context, split_partitions
from bridge.spark.read.scan import read_partition
from bridge.spark.stream.limits import default_read_limit, limits
from bridge.spark.stream.offsets import FileOffset
from filestore.errors import SnapshotNotFound
from filestore.format.snapshot import COMPACT


class FileStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.name = opts.common.table
        self.ctx = read_context(opts, schema, self._table())
        self.cap: int | None = None  # Trigger.AvailableNow target snapshot
        self.recorded: int | None = None  # the consumer's next snapshot as last written

    def _table(self) -> Any:
        return open_table(self.opts.common.warehouse, self.name)

    # --- offsets ------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        table, o = self._table(), self.opts
        latest = table.latest_snapshot()
        if o.scan_mode == "latest-full":
            return FileOffset(self.name, 0, None, full=True).to_json()
        if o.scan_mode == "latest":
            snap = latest
        elif o.scan_mode == "from-snapshot":
            assert o.scan_snapshot_id is not None
            return FileOffset(self.name, o.scan_snapshot_id - 1, None).to_json()
        elif o.scan_mode == "from-barrier":
            snap = table.snapshot_at_barrier(o.scan_barrier)
        else:
            snap = table.snapshot_at_time(o.scan_timestamp)
        if snap is None:
            return FileOffset(self.name, 0, None).to_json()
        return FileOffset(self.name, int(snap.id), snap.barrier).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        return default_read_limit(self.opts)

    def prepareForTriggerAvailableNow(self) -> None:
        latest = self._table().latest_snapshot()
        self.cap = 0 if latest is None else int(latest.id)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        latest = self._table().latest_snapshot()
        return (
            None
            if latest is None
            else FileOffset(self.name, int(latest.id), latest.barrier).to_json()
        )

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = FileOffset.from_json(start)
        table = self._table()
        self._record(begin.snapshot + 1, table)  # where it stands, after a restart too
        # only the snapshots after `begin`: Spark asks at every trigger, and a table keeps
        # an hour of snapshots by default
        pending = list(table.snapshot_manager.iter_backwards(down_to=begin.snapshot + 1))
        self._check_not_expired(table, begin)
        pending.reverse()
        if self.cap is not None:
            pending = [s for s in pending if s.id <= self.cap]
        if not pending:
            return start
        end = self._admit(begin, pending, limit)
        barrier = next(
            (s.barrier for s in reversed(pending) if s.id <= end and s.barrier is not None),
            begin.barrier,
        )
        return FileOffset(self.name, end, barrier).to_json()

    def _check_not_expired(self, table: Any, begin: FileOffset) -> None:
        """Changes the stream has not read were expired: say so, and what keeps them."""
        earliest = table.snapshot_manager.earliest_id()
        # the next snapshot still there: its changes are readable (stored changelog)
        if begin.full or begin.snapshot == 0 or earliest is None or begin.snapshot + 1 >= earliest:
            return
        raise self.expired(begin.snapshot, earliest)

    def expired(self, stands_at: int, earliest: int | None) -> SnapshotsExpired:
        """The error of a stream whose next snapshots expired before it read them."""
        gone = f"snapshots before {earliest}" if earliest is not None else "its snapshots"
        return SnapshotsExpired(
            f"table {self.name}: the stream stands at snapshot {stands_at}, but {gone} "
            "expired while it was behind or stopped, and their changes are gone. Give the "
            "stream the option consumer-id (expiration then keeps what it has still to "
            "read), or a longer snapshot.time-retained; to go on, start it again from a new "
            "checkpoint (scan.mode picks where)"
        )

    def _admit(self, begin: FileOffset, pending: list[Any], limit: ReadLimit) -> int:
        max_rows, max_units = limits(self.opts, limit)
        if begin.full or (max_rows is None and max_units is None):
            return int(pending[-1].id)  # a full snapshot is one unit
        end, rows, units = int(pending[0].id), 0, 0
        for snap in pending:
            if snap.commit_kind != COMPACT:
                rows += int(snap.delta_record_count or 0)
                units += 1
            over = (max_rows is not None and rows > max_rows) or (
                max_units is not None and units > max_units
            )
            if over and snap.id != pending[0].id:
                break
            end = int(snap.id)
        return end

    # --- planning and reading -----------------------------------------------------------
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        a, b = FileOffset.from_json(start), FileOffset.from_json(end)
        if b.snapshot <= a.snapshot:
            return []
        table = self._table()
        try:
            if a.full:
                return split_partitions(table, self.ctx, b.snapshot)
            return changes_partitions(table, self.ctx, a.snapshot, b.snapshot)
        except SnapshotNotFound as exc:  # a batch planned before, run again after a restart
            raise self.expired(a.snapshot, table.snapshot_manager.earliest_id()) from exc

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._record(FileOffset.from_json(end).snapshot + 1)

    def _record(self, next_snapshot: int, table: Any = None) -> None:
        """The consumer's position (option consumer-id), written when it moved."""
        consumer = self.opts.consumer_id
        if consumer is not None and next_snapshot != self.recorded:
            (table or self._table()).record_consumer(consumer, next_snapshot)
            self.recorded = next_snapshot
