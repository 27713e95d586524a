"""Reading a table's Kafka log for the `log` and `hybrid` tiers.

`LogScanner` runs in the long-lived driver-side stream reader: it walks the log
reading only headers (no JSON decoding) to find barrier markers and count
records, so `latestOffset` can end every micro-batch exactly on a barrier that
is complete in every partition. `read_log_range` runs in executors: one Spark
partition per Kafka partition (= bucket), records [start, end) decoded with
`logstore.codec.decode_records`, each row tagged with the barrier whose marker
follows it. Consumers read `read_committed`: records of aborted transactions
never reach them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from bridge.spark.arrow_schema import conform
from bridge.spark.errors import SparkBridgeError
from bridge.spark.options import BARRIER, ROW_KIND

EOF_CODE = -191  # confluent_kafka.KafkaError._PARTITION_EOF


class LogOffsetsExpired(SparkBridgeError):
    """The log no longer holds the offsets a query asks for (past log.retention)."""


def log_spec(table: Any) -> Any:
    """The table's LogSpec: the one composition in ``bridge.tables``."""
    from bridge.tables import log_spec_for

    return log_spec_for(table)


def consumer(bootstrap: str, *, eof: bool, isolation: str = "read_committed") -> Any:
    from confluent_kafka import Consumer

    from logstore.client_config import confluent_config

    return Consumer(
        confluent_config(
            bootstrap,
            None,
            {
                "group.id": f"dts-spark-{uuid.uuid4().hex}",  # never subscribed: assign() only
                "enable.auto.commit": False,
                "isolation.level": isolation,
                "enable.partition.eof": eof,
                "auto.offset.reset": "error",
            },
        )
    )


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    from confluent_kafka import TopicPartition

    c = consumer(bootstrap, eof=False)
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            for p in range(partitions)
        }
    finally:
        c.close()


@dataclass(frozen=True)
class MarkerAt:
    offset: int
    barrier: int
    rows: int  # data records since the previous marker in this partition


@dataclass
class Barrier:
    """A barrier complete in every partition: its end offsets and record count."""

    barrier: int
    ends: dict[int, int]
    rows: int


@dataclass
class LogScanner:
    """Driver-side: finds barrier markers per partition past given start offsets."""

    bootstrap: str
    topic: str
    partitions: int
    budget_s: float = 2.0
    pos: dict[int, int] = field(default_factory=dict)
    pending_rows: dict[int, int] = field(default_factory=dict)
    markers: dict[int, list[MarkerAt]] = field(default_factory=dict)
    _consumer: Any = None

    def _reset(self, start: dict[int, int]) -> None:
        self.pos = dict(start)
        self.pending_rows = dict.fromkeys(start, 0)
        self.markers = {p: [] for p in start}

    def scan(self, start: dict[int, int]) -> None:
        """Scan from `pos` (reset to `start` when the query rewound) until caught up."""
        if (
            any(self.pos.get(p, -1) > o for p, o in start.items())
            or set(self.pos) != set(start)
            or any(not self._covers(p, o) for p, o in start.items())
        ):
            self._reset(start)
        from confluent_kafka import TopicPartition

        if self._consumer is None:
            self._consumer = consumer(self.bootstrap, eof=True)
        c = self._consumer
        c.assign([TopicPartition(self.topic, p, self.pos[p]) for p in sorted(self.pos)])
        left = set(self.pos)
        deadline = time.monotonic() + self.budget_s
        while left and time.monotonic() < deadline:
            for msg in c.consume(num_messages=10000, timeout=0.2):
                err = msg.error()
                p = msg.partition()
                if err is not None:
                    if err.code() == EOF_CODE:
                        left.discard(p)
                        continue
                    raise LogOffsetsExpired(f"reading {self.topic}[{p}] failed: {err}")
                self._see(p, msg)

    def _covers(self, p: int, start: int) -> bool:
        # the cache is valid for `start` when start is our origin or right after a known marker
        return start == self.pos.get(p) or any(
            m.offset + 1 == start for m in self.markers.get(p, [])
        )

    def _see(self, p: int, msg: Any) -> None:
        from logstore.markers import parse_marker

        self.pos[p] = msg.offset() + 1
        if msg.value() is None:
            marker = parse_marker(p, msg.offset(), msg.headers())
            if marker is not None:
                self.markers[p].append(
                    MarkerAt(marker.offset, marker.barrier, self.pending_rows[p])
                )
                self.pending_rows[p] = 0
            return
        self.pending_rows[p] += 1

    def complete_barriers(self, start: dict[int, int]) -> list[Barrier]:
        """Barriers whose markers lie at or after `start` in every partition, in order."""
        per_part = {
            p: {m.barrier: m for m in self.markers.get(p, []) if m.offset >= start[p]}
            for p in start
        }
        common = set.intersection(*(set(d) for d in per_part.values())) if per_part else set()
        return [
            Barrier(
                b,
                {p: per_part[p][b].offset + 1 for p in start},
                sum(per_part[p][b].rows for p in start),
            )
            for b in sorted(common)
        ]

    def markers_between(self, p: int, start: int, end: int) -> list[tuple[int, int]]:
        return [(m.offset, m.barrier) for m in self.markers.get(p, []) if start <= m.offset < end]

    def forget_before(self, offsets: dict[int, int]) -> None:
        for p, o in offsets.items():
            keep = [m for m in self.markers.get(p, []) if m.offset + 1 >= o]
            self.markers[p] = keep

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def admit(
    barriers: list[Barrier], max_rows: int | None, max_barriers: int | None
) -> Barrier | None:
    """The last barrier of the next micro-batch (whole barriers, at least one)."""
    chosen, rows = None, 0
    for i, b in enumerate(barriers):
        rows += b.rows
        over = (max_rows is not None and rows > max_rows) or (
            max_barriers is not None and i + 1 > max_barriers
        )
        if over and chosen is not None:
            break
        chosen = b
    return chosen


class LogPartition(InputPartition):
    """Records [start, end) of one Kafka partition and the markers inside that range."""

    def __init__(
        self,
        bootstrap: str,
        spec: Any,
        partition: int,
        start: int,
        end: int,
        markers: list[tuple[int, int]],
        target: pa.Schema,
        columns: list[str],
    ) -> None:
        super().__init__(partition)
        self.bootstrap, self.spec, self.partition = bootstrap, spec, partition
        self.start, self.end, self.markers = start, end, markers
        self.target, self.columns = target, columns


def read_log_range(p: LogPartition, timeout_s: float = 60.0) -> Iterator[pa.RecordBatch]:
    """Executor side: decode one partition's range and tag rows with their barriers."""
    from confluent_kafka import TopicPartition

    from logstore.codec import RawRecord, decode_records

    c = consumer(p.bootstrap, eof=False)
    records: list[Any] = []
    try:
        c.assign([TopicPartition(p.spec.topic, p.partition, p.start)])
        deadline = time.monotonic() + timeout_s
        last = p.start - 1
        while last < p.end - 1:
            if time.monotonic() > deadline:
                raise LogOffsetsExpired(
                    f"{p.spec.topic}[{p.partition}]: could not read up to offset {p.end} in {timeout_s:.0f} s"
                )
            for msg in c.consume(num_messages=10000, timeout=0.5):
                if msg.error() is not None:
                    raise LogOffsetsExpired(f"{p.spec.topic}[{p.partition}]: {msg.error()}")
                if msg.offset() >= p.end:
                    last = msg.offset()
                    break
                last = msg.offset()
                if msg.value() is not None:
                    records.append(
                        RawRecord(p.partition, msg.offset(), msg.key(), msg.value(), msg.headers())
                    )
    finally:
        c.close()
    if not records:
        return
    table = decode_records(records, p.spec).table
    yield from _tag(table, p)


def _tag(table: pa.Table, p: LogPartition) -> Iterator[pa.RecordBatch]:
    offsets = table.column("_offset").to_numpy()
    m_off = np.array([m[0] for m in p.markers], dtype=np.int64)
    m_bar = np.array([m[1] for m in p.markers], dtype=np.int64)
    idx = np.searchsorted(m_off, offsets)  # the marker after each row closes its barrier
    # rows past the range's last marker belong to a barrier not read in this range
    keep = idx < len(m_off)
    idx_c = np.minimum(idx, max(len(m_off) - 1, 0))
    barriers = m_bar[idx_c] if len(m_off) else np.zeros(len(offsets), dtype=np.int64)
    table = table.append_column(BARRIER, pa.array(barriers, pa.int64())).filter(pa.array(keep))
    keep_cols = [*p.columns, ROW_KIND, BARRIER]
    table = table.select([c for c in keep_cols if c in table.schema.names])
    for batch in table.to_batches(max_chunksize=65536):
        if batch.num_rows:
            yield conform(batch, p.target)
