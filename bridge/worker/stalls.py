"""Whether a table stopped progressing, where and why: ``/status`` ``stalled`` and the
``dts_worker_table_stalled`` / ``dts_worker_table_stall_offset`` metrics the
``DtsWorkerTableStalled`` alert is built on.

A table stalls in two ways. A stage fails (its data path or its commits raise): it is
retried with a backoff, and until it works again it is stalled at once, with the error.
Or nothing fails and nothing moves: a bucket has records waiting and its position has
not moved for ``stall_after_s`` (a writer held at the sorted-run stop trigger, a fetch
that never returns). A record the table cannot take never stalls it: it is a dead
letter (``bridge.worker.tiers``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from bridge.worker.metrics import WorkerMetrics
from bridge.worker.state.status import StallReport, TableStatus

#: seconds without progress, records waiting, before a healthy bucket counts as stalled
STALL_AFTER_S = 30.0


class StallWatch:
    """The stall state of one table, kept in its status and the worker's metrics."""

    def __init__(
        self,
        status: TableStatus,
        metrics: WorkerMetrics,
        *,
        stall_after_s: float = STALL_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.status = status
        self.metrics = metrics
        self.stall_after_s = stall_after_s
        self._clock = clock
        self._moved: dict[int, tuple[int, float]] = {}  # bucket -> (position, when it moved)
        self._labels: list[tuple[str, ...]] = []  # stall_offset series now exported
        self._set_gauge(0)

    def failing(self, stage: str, error: BaseException, positions: Mapping[int, int]) -> None:
        """``stage`` raised ``error``; ``positions``: partition -> offset it stands at
        (-1: not opened yet)."""
        self._report(f"{stage}: {type(error).__name__}", f"{error}", positions)

    def observe(self, positions: Mapping[int, int], waiting: Mapping[int, bool]) -> None:
        """A healthy table's owned buckets: stalled when one with records ``waiting``
        has not moved for ``stall_after_s``; clear once every one moves or catches up."""
        now = self._clock()
        stuck: dict[int, int] = {}
        for b, pos in positions.items():
            seen = self._moved.get(b)
            if seen is None or seen[0] != pos or not waiting.get(b, False):
                self._moved[b] = (pos, now)
            elif now - seen[1] >= self.stall_after_s:
                stuck[b] = pos
        for b in set(self._moved) - set(positions):
            del self._moved[b]
        if stuck:
            wait = max(now - self._moved[b][1] for b in stuck)
            self._report("no progress", f"records wait and none moved for {wait:.0f} s", stuck)
        elif self.status.stall is not None and self.status.stall.reason == "no progress":
            self.clear()

    def clear(self) -> None:
        """The table progresses again."""
        self._moved.clear()
        if self.status.stall is None:
            return
        self.status.stall = None
        self._set_gauge(0)
        self._drop_series()

    def _report(self, reason: str, detail: str, positions: Mapping[int, int]) -> None:
        prev = self.status.stall
        since = prev.since_ms if prev is not None else int(time.time() * 1000)
        self.status.stall = StallReport(reason, detail, dict(sorted(positions.items())), since)
        self._set_gauge(1)
        self._drop_series()
        gauge = self.metrics.table_stall_offset
        for p, offset in sorted(positions.items()):
            labels = (self.status.table, self.metrics.job, str(p), reason)
            gauge.labels(*labels).set(offset)
            self._labels.append(labels)

    def _drop_series(self) -> None:
        for labels in self._labels:
            self.metrics.table_stall_offset.remove(*labels)
        self._labels = []

    def _set_gauge(self, value: int) -> None:
        self.metrics.table_stalled.labels(self.status.table, self.metrics.job).set(value)
