"""Driver-side planning of log-tier reads: barrier markers, admission, micro-batch ends.

`LogScanner` runs in the long-lived driver-side stream reader: it walks the log
reading only headers (`logstore.scan.log_entry`: no JSON decoding) to find barrier
markers and count records, so `latestOffset` can end every micro-batch exactly on a
barrier that is complete in every partition. The ranges it plans
(`parts.LogPartition`) are read in the executors by `bridge.spark.read.log`.

It keeps up with a live log: the consumer stays assigned while the query moves forward
(it prefetches in the background), partitions remember that they are at the end until
a new record arrives, and a call returns as soon as every partition is caught up; the
budget only bounds how long it waits for a partition still behind. (librdkafka emits
partition-EOF once per time it reaches the end, so a scan that re-assigned its consumer
and waited for EOF from every partition waited its whole budget on an idle partition.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from bridge.spark.read.kafka_access import consumer
from logstore.scan import LogEntry, log_entry, scan_range


def _assign(c: Any, topic: str, pos: dict[int, int]) -> None:
    from confluent_kafka import TopicPartition  # not in batch scans' workers (kafka_access)

    c.assign([TopicPartition(topic, p, pos[p]) for p in sorted(pos)])


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


# how long one poll waits when every partition already reported EOF: just enough to
# pick up records the background fetcher has queued
IDLE_POLL_S = 0.02
BEHIND_POLL_S = 0.05


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
    at_end: set[int] = field(default_factory=set)
    origin: dict[int, int] = field(default_factory=dict)
    _consumer: Any = None

    def _reset(self, start: dict[int, int]) -> None:
        self.pos = dict(start)
        self.pending_rows = dict.fromkeys(start, 0)
        self.markers = {p: [] for p in start}
        self.at_end = set()
        self.origin = dict(start)
        if self._consumer is not None:
            _assign(self._consumer, self.topic, self.pos)

    def _covers(self, p: int, start: int) -> bool:
        # the cache is valid for `start` when start is our origin or right after a known marker
        return start == self.origin.get(p) or any(
            m.offset + 1 == start for m in self.markers.get(p, [])
        )

    def _see(self, e: LogEntry) -> None:
        self.pos[e.partition] = e.offset + 1
        if e.is_row:
            self.pending_rows[e.partition] += 1
        elif e.marker is not None:
            rows = self.pending_rows[e.partition]
            self.markers[e.partition].append(MarkerAt(e.offset, e.marker.barrier, rows))
            self.pending_rows[e.partition] = 0

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

    def cover(self, start: dict[int, int], end: dict[int, int], timeout_s: float = 60.0) -> None:
        """Make sure every marker in [start, end) is known before a micro-batch is planned.

        Usually they are (the scan that chose `end` saw them); after a restart or a rewind
        the range is scanned again, to its end whatever the budget: planning a range with
        markers missing would leave its rows without a barrier.
        """
        known = set(self.pos) == set(start) and all(
            self._covers(p, start[p]) and self.pos[p] >= end.get(p, 0) for p in start
        )
        if known:
            return
        if self._consumer is None:
            self._consumer = consumer(self.bootstrap, eof=True)
        self._reset(start)
        ranges = {p: (o, end.get(p, 0)) for p, o in start.items()}
        for e in scan_range(self._consumer, self.topic, ranges, timeout_s):
            self._see(e)
        _assign(self._consumer, self.topic, self.pos)  # the live scan goes on from here

    def scan(self, start: dict[int, int]) -> None:
        """Read past `pos` until every partition is at its end (or the budget is spent)."""
        if self._consumer is None:
            self._consumer = consumer(self.bootstrap, eof=True)
            self.pos = {}  # force the first assignment below
        # keep what was scanned when `start` is a known point of it (the query moved on to
        # a barrier end we saw); anything else (a rewind, a jump) rescans from `start`
        if set(self.pos) != set(start) or any(
            not self._covers(p, o) or self.pos[p] < o for p, o in start.items()
        ):
            self._reset(start)
        c = self._consumer
        behind = set(self.pos) - self.at_end
        deadline = time.monotonic() + self.budget_s
        while True:
            # consume() waits its whole timeout unless it fills the batch; EOF follows new
            # records within a fetch wait (kafka_access), so short polls suffice
            timeout = min(BEHIND_POLL_S, self.budget_s) if behind else IDLE_POLL_S
            for msg in c.consume(num_messages=10000, timeout=timeout):
                p = msg.partition()
                e = log_entry(self.topic, msg)
                if e is None:
                    self.at_end.add(p)
                    behind.discard(p)
                    continue
                if e.offset < self.pos.get(p, 0):
                    continue  # already seen (fetched before a re-assignment)
                self.at_end.discard(p)
                behind.add(p)
                self._see(e)
            if not behind or time.monotonic() >= deadline:
                return


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


@dataclass(frozen=True)
class BatchEnd:
    """Where the next micro-batch of a log-tier stream ends.

    `barrier`: the last barrier wholly inside it (None: none). `partial`: it also holds
    part of a later barrier (record-level admission cut one), so it completes no barrier
    exactly and a sink must not stamp its commit with one.
    """

    offsets: dict[int, int]
    barrier: int | None
    partial: bool = False


def record_admission(start: dict[int, int], barriers: list[Barrier], max_offsets: int) -> BatchEnd:
    """Kafka's maxOffsetsPerTrigger: at most `max_offsets` offsets, split over partitions
    in proportion to what each has ready (at least one each, so a batch always moves).

    Only offsets of complete barriers are admitted, so every row has its barrier. A batch
    ends on the last barrier that fits in the allowance; only when none fits does it end
    inside one (`BatchEnd.partial`).
    """
    ready = barriers[-1].ends
    avail = {p: max(0, ready[p] - start.get(p, 0)) for p in ready}
    total = sum(avail.values())
    if total <= max_offsets:
        return BatchEnd(ready, barriers[-1].barrier)
    end = {
        p: start.get(p, 0) + (min(n, max(1, n * max_offsets // total)) if n else 0)
        for p, n in avail.items()
    }
    done = [b for b in barriers if all(b.ends[p] <= end[p] for p in b.ends)]
    if done:  # end on the last barrier that fits: its commit can carry it
        return BatchEnd(dict(done[-1].ends), done[-1].barrier)
    return BatchEnd(end, None, partial=True)
