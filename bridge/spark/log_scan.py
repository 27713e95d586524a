"""A marker scanner that keeps up with a live log: one assignment, background fetching.

`LogScanner.scan` re-assigns its consumer on every call and then waits for a
partition-EOF event from each partition. librdkafka emits EOF once per time it
reaches the end, so an idle partition never reports again and every call waited
its whole budget (`log.poll-timeout`, 2 s: the micro-batch latency); and the
re-assignment restarted fetching, so with a short budget a live stream could see
nothing at all. Here the consumer stays assigned while the query moves forward
(it prefetches in the background), partitions remember that they are at the end
until a new record arrives, and a call returns as soon as every partition is
caught up; the budget only bounds how long it waits for a partition still behind.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from bridge.spark.logtier import EOF_CODE, LogOffsetsExpired, LogScanner, consumer

# how long one poll waits when every partition already reported EOF: just enough to
# pick up records the background fetcher has queued
IDLE_POLL_S = 0.02


@dataclass
class LiveLogScanner(LogScanner):
    at_end: set[int] = field(default_factory=set)
    origin: dict[int, int] = field(default_factory=dict)

    def _reset(self, start: dict[int, int]) -> None:
        super()._reset(start)
        self.at_end = set()
        self.origin = dict(start)
        if self._consumer is not None:
            from confluent_kafka import TopicPartition

            self._consumer.assign(
                [TopicPartition(self.topic, p, self.pos[p]) for p in sorted(self.pos)]
            )

    def _covers(self, p: int, start: int) -> bool:
        return start == self.origin.get(p) or super()._covers(p, start)

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
        deadline = time.monotonic() + timeout_s
        while any(self.pos[p] < end.get(p, 0) for p in self.pos):
            if time.monotonic() > deadline:
                raise LogOffsetsExpired(
                    f"{self.topic}: could not re-read offsets {start} .. {end} in {timeout_s:.0f} s"
                )
            for msg in self._consumer.consume(num_messages=10000, timeout=0.2):
                err = msg.error()
                if err is not None:
                    if err.code() != EOF_CODE:
                        raise LogOffsetsExpired(f"reading {self.topic} failed: {err}")
                    continue
                if msg.offset() >= self.pos.get(msg.partition(), 0):
                    self._see(msg.partition(), msg)

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
            timeout = min(0.2, self.budget_s) if behind else IDLE_POLL_S
            for msg in c.consume(num_messages=10000, timeout=timeout):
                err = msg.error()
                p = msg.partition()
                if err is not None:
                    if err.code() == EOF_CODE:
                        self.at_end.add(p)
                        behind.discard(p)
                        continue
                    raise LogOffsetsExpired(f"reading {self.topic}[{p}] failed: {err}")
                if msg.offset() < self.pos.get(p, 0):
                    continue  # already seen (fetched before a re-assignment)
                self.at_end.discard(p)
                behind.add(p)
                self._see(p, msg)
            if not behind or time.monotonic() >= deadline:
                return
