"""Streaming read of the Kafka log tier: read_committed, micro-batches end on barrier markers.

Rows carry `_row_kind` and `_barrier` (the barrier whose marker closes the row's
transaction). An upsert-mode log (a primary-key table's default) is read as a full
changelog, -U/+U and full -D rows (`bridge.spark.read.log_state`); `log.normalize=false`
gives its rows as stored (+I for every upsert, -D maybe key-only).

scan.mode: `latest-full` (default) = the earliest retained offset; `latest` = the end
of the log when the query starts; `from-snapshot` = the log offsets FileStore snapshot
`scan.snapshot-id` recorded; `from-barrier` = right after barrier `scan.barrier`
(taken from the snapshot at that barrier); `from-timestamp` = Kafka offsets for that time.
A micro-batch holds whole barriers: `maxRowsPerTrigger` is soft (at least one barrier).
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
from bridge.spark.options.catalog import open_table
from bridge.spark.read.kafka_access import consumer
from bridge.spark.read.log import read_log_range
from bridge.spark.read.log_state import check_replayable, state_refs
from bridge.spark.read.parts import LogPartition, LogStateRef
from bridge.spark.read.plan_log import BatchEnd, LogScanner, admit, record_admission
from bridge.spark.read.plan_scan import read_context
from bridge.spark.stream.limits import default_read_limit, limits
from bridge.spark.stream.offsets import LogOffset
from bridge.tables import log_spec_for
from logstore.errors import OffsetsExpiredError


class LogTierReader:
    """What the log and hybrid stream readers share: spec, scanner, admission, planning."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        if not opts.common.bootstrap:
            raise OptionError('the log tier needs .option("bootstrap", "host:port") (Kafka)')
        self.opts = opts
        self.bootstrap: str = opts.common.bootstrap
        table = open_table(opts.common.warehouse, opts.common.table)
        self.spec = log_spec_for(table)
        self.ctx = read_context(opts, schema, table)
        self.scanner = LogScanner(
            self.bootstrap, self.spec.topic, self.spec.buckets, opts.poll_timeout_s
        )
        self.cap: dict[int, int] | None = None  # Trigger.AvailableNow: end offsets at start
        self._meta: Any = None  # consumer for watermark queries
        self._floors: dict[int, int] = {}  # partition -> the snapshot its last range used

    def table(self) -> Any:
        return open_table(self.opts.common.warehouse, self.opts.common.table)

    def _watermarks(self) -> dict[int, tuple[int, int]]:
        """(low, high) per partition through one kept consumer: `latestOffset` asks on
        every trigger, and a consumer made and closed per call cost tens of ms each."""
        from logstore.watermarks import watermarks  # see bridge.spark.read.kafka_access

        if self._meta is None:
            self._meta = consumer(self.bootstrap, eof=False)
        return watermarks(self._meta, self.spec.topic, self.spec.buckets)

    def earliest(self) -> dict[int, int]:
        return {p: lo for p, (lo, _hi) in self._watermarks().items()}

    def latest(self) -> dict[int, int]:
        return {p: hi for p, (_lo, hi) in self._watermarks().items()}

    def close(self) -> None:
        self.scanner.close()
        if self._meta is not None:
            self._meta.close()
            self._meta = None

    def check_retained(self, start: dict[int, int]) -> None:
        for p, lo in self.earliest().items():
            if start.get(p, 0) < lo:
                raise OffsetsExpiredError(
                    self.spec.topic,
                    p,
                    start.get(p, 0),
                    lo,
                    remedy="restart the query with tier=hybrid (the FileStore snapshot, then the log)",
                )

    def next_end(self, start: dict[int, int], limit: ReadLimit) -> BatchEnd | None:
        """End offsets and barrier of the next micro-batch from `start`, or None when none is ready."""
        self.scanner.scan(start)
        barriers = self.scanner.complete_barriers(start)
        if self.cap is not None:
            cap = self.cap
            barriers = [b for b in barriers if all(b.ends[p] <= cap.get(p, 0) for p in b.ends)]
        if self.opts.max_offsets_per_trigger is not None and barriers:
            return record_admission(start, barriers, self.opts.max_offsets_per_trigger)
        max_rows, max_barriers = limits(self.opts, limit)
        chosen = admit(barriers, max_rows, max_barriers)
        return None if chosen is None else BatchEnd(chosen.ends, chosen.barrier)

    @property
    def normalizes(self) -> bool:
        """Whether ranges are read as a full changelog (`bridge.spark.read.log_state`)."""
        upsert = self.spec.effective_changelog_mode == "upsert"
        return self.opts.log_normalize and upsert and bool(self.spec.primary_key)

    def _states(self, start: dict[int, int], end: dict[int, int]) -> dict[int, LogStateRef]:
        if not self.normalizes:
            return {}
        starts = {p: start.get(p, 0) for p in end if end[p] > start.get(p, 0)}
        # a partition's start only grows, so its snapshot never moves back: walk down to
        # the oldest of theirs (all of them when a partition has none yet)
        known = all(p in self._floors for p in starts)
        floor = min((self._floors[p] for p in starts), default=None) if known else None
        refs = state_refs(self.table(), self.opts.common.warehouse, starts, floor)
        check_replayable(refs, self.earliest(), self.spec.topic)
        for p, ref in refs.items():
            if ref.snapshot_id is not None:
                self._floors[p] = ref.snapshot_id
        return refs

    def plan(self, start: dict[int, int], end: dict[int, int]) -> list[InputPartition]:
        parts: list[InputPartition] = []
        states = self._states(start, end)
        for p in sorted(end):
            a, b = start.get(p, 0), end[p]
            if b > a:
                # every known marker from `a` on: with record-level admission a range may
                # end inside a barrier, whose rows are tagged by the marker past `b`
                markers = self.scanner.markers_between(p, a, 2**62)
                parts.append(
                    LogPartition(
                        self.bootstrap,
                        self.spec,
                        p,
                        a,
                        b,
                        markers,
                        self.ctx.target,
                        self.ctx.columns,
                        states.get(p),
                    )
                )
        return parts

    def start_offsets(self) -> dict[int, int]:
        """Where a new log-tier query starts: Kafka's startingOffsets, else per scan.mode."""
        o = self.opts
        if o.start_offsets is not None:
            return self._kafka_start(o.start_offsets)
        if o.scan_mode == "latest-full":
            return self.earliest()
        if o.scan_mode == "latest":
            return self.latest()
        if o.scan_mode == "from-timestamp":
            return self._offsets_for_time(o.scan_timestamp or 0)
        table = self.table()
        snap = (
            table.snapshot(o.scan_snapshot_id)
            if o.scan_mode == "from-snapshot"
            else table.snapshot_at_barrier(o.scan_barrier)
        )
        if snap is None or not snap.log_offsets:
            raise OptionError(
                f"{table.name}: no snapshot with log offsets for scan.mode={o.scan_mode}"
            )
        return {int(p): int(v) for p, v in snap.log_offsets.items()}

    def _kafka_start(self, given: str | dict[int, int]) -> dict[int, int]:
        earliest, latest = self.earliest(), self.latest()
        if given == "earliest":
            return earliest
        if given == "latest":
            return latest
        assert isinstance(given, dict)
        unknown = sorted(set(given) - set(earliest))
        if unknown:
            raise OptionError(
                f"startingOffsets names partitions {unknown}; {self.spec.topic} has "
                f"{self.spec.buckets} (one per bucket)"
            )
        pick = {-2: earliest, -1: latest}
        return {p: pick[given[p]][p] if given.get(p, -2) in pick else given[p] for p in earliest}

    def _offsets_for_time(self, ms: int) -> dict[int, int]:
        from confluent_kafka import TopicPartition  # see bridge.spark.read.kafka_access

        c = consumer(self.bootstrap, eof=False)
        try:
            tps = [TopicPartition(self.spec.topic, p, ms) for p in range(self.spec.buckets)]
            found = c.offsets_for_times(tps, timeout=10)
        finally:
            c.close()
        latest = self.latest()
        return {
            tp.partition: (tp.offset if tp.offset >= 0 else latest[tp.partition]) for tp in found
        }


class LogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.tier = LogTierReader(opts, schema)
        self.name = opts.common.table

    def initialOffset(self) -> dict[str, Any]:
        return LogOffset(self.name, self.tier.start_offsets(), None).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        return default_read_limit(self.tier.opts)

    def prepareForTriggerAvailableNow(self) -> None:
        self.tier.cap = self.tier.latest()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return LogOffset(self.name, self.tier.latest(), None).to_json()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = LogOffset.from_json(start)
        self.tier.check_retained(begin.offsets)
        nxt = self.tier.next_end(begin.offsets, limit)
        if nxt is None:
            return start
        barrier = nxt.barrier if nxt.barrier is not None else begin.barrier
        return LogOffset(self.name, nxt.offsets, barrier, nxt.partial).to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        a, b = LogOffset.from_json(start), LogOffset.from_json(end)
        if a.offsets == b.offsets:
            return []
        self.tier.scanner.cover(a.offsets, b.offsets)  # after a restart: re-read the range
        return self.tier.plan(a.offsets, b.offsets)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, LogPartition):  # PySpark's stand-in for no partitions
            return iter(())
        return read_log_range(partition)

    def commit(self, end: dict[str, Any]) -> None:
        self.tier.scanner.forget_before(LogOffset.from_json(end).offsets)

    def stop(self) -> None:
        self.tier.close()
