"""Hybrid streaming read (FLIP-188's hybrid source): a FileStore snapshot, then the log.

The first micro-batch emits the current snapshot S in full (+I rows tagged with S's
barrier); its end offset holds the log offsets S recorded (`Snapshot.log_offsets`:
partition -> next offset after S's barrier), and every later micro-batch reads the
log from exactly there, ending on barrier markers. Because S holds exactly the data
of barriers <= S.barrier in every bucket and the log resumes right after that
barrier's markers, there is no gap and no overlap at the switch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from bridge.spark.errors import OptionError
from bridge.spark.options import ReadOptions
from bridge.spark.read.log import read_log_range
from bridge.spark.read.parts import LogPartition
from bridge.spark.read.plan_scan import split_partitions
from bridge.spark.read.scan import read_partition
from bridge.spark.stream._log import LogTierReader
from bridge.spark.stream.limits import default_read_limit
from bridge.spark.stream.offsets import HybridOffset


class HybridStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.tier = LogTierReader(opts, schema)
        self.name = opts.common.table

    def initialOffset(self) -> dict[str, Any]:
        return HybridOffset(self.name, "snapshot").to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        return default_read_limit(self.tier.opts)

    def prepareForTriggerAvailableNow(self) -> None:
        self.tier.cap = self.tier.latest()

    def _switch_point(self) -> HybridOffset:
        snap = self.tier.table().latest_snapshot()
        if snap is None:  # nothing in the FileStore yet: the whole log is the table
            return HybridOffset(self.name, "log", 0, self.tier.earliest(), None)
        if snap.log_offsets is None:
            raise OptionError(
                f"{self.name}: snapshot {snap.id} records no log offsets (it was not committed from "
                "the log); read this table with tier=file"
            )
        offsets = {p: 0 for p in range(self.tier.spec.buckets)}
        offsets.update({int(p): int(o) for p, o in snap.log_offsets.items()})
        return HybridOffset(self.name, "log", int(snap.id), offsets, snap.barrier)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = HybridOffset.from_json(start)
        if begin.phase == "snapshot":
            return self._switch_point().to_json()
        self.tier.check_retained(begin.offsets)
        nxt = self.tier.next_end(begin.offsets, limit)
        if nxt is None:
            return start
        barrier = nxt.barrier if nxt.barrier is not None else begin.barrier
        return HybridOffset(
            self.name, "log", begin.snapshot, nxt.offsets, barrier, nxt.partial
        ).to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        a, b = HybridOffset.from_json(start), HybridOffset.from_json(end)
        if a.phase == "snapshot":
            if b.snapshot == 0:
                return []
            return split_partitions(self.tier.table(), self.tier.ctx, b.snapshot)
        if a.offsets == b.offsets:
            return []
        self.tier.scanner.cover(a.offsets, b.offsets)  # after a restart: re-read the range
        return self.tier.plan(a.offsets, b.offsets)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, LogPartition):
            return read_log_range(partition)
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        off = HybridOffset.from_json(end)
        if off.phase == "log":
            self.tier.scanner.forget_before(off.offsets)

    def stop(self) -> None:
        self.tier.close()
