"""Whether the worker reaches its Kafka log, said once when that changes.

Every Kafka client of the worker retries a lost broker by itself, and nothing the
worker keeps depends on the broker staying up: committed barriers are in the
FileStore, and whatever was fetched and not yet committed is fetched again from the
last snapshot's offsets. So a broker outage, however long, needs no action from the
worker but patience; what it needs is for the operator to know. ``LogReachability``
turns the clients' reconnect noise into one warning when the log becomes unreachable,
a reminder now and then while it stays so, one line when it answers again, and the
``dts_worker_log_reachable`` gauge and ``/status`` ``log`` field alerts are built on.

Whether a broker answers is decided by the fetch thread (``bridge.worker.fetch``),
which calls :meth:`unreachable` and :meth:`reached` from its probes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from bridge.worker.metrics import WorkerMetrics
from bridge.worker.state.status import LogLinkStatus

log = logging.getLogger(__name__)

#: how often a still unreachable log is mentioned again
REMIND_EVERY_S = 30.0


class LogReachability:
    def __init__(
        self,
        bootstrap: str,
        metrics: WorkerMetrics,
        status: LogLinkStatus,
        *,
        remind_every_s: float = REMIND_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.bootstrap = bootstrap
        self.metrics = metrics
        self.status = status
        self.remind_every_s = remind_every_s
        self._clock = clock
        self._wall_ms = wall_ms
        self._down_at = 0.0
        self._reminded_at = 0.0
        metrics.log_reachable.labels(metrics.job).set(1)

    @property
    def reachable(self) -> bool:
        return self.status.reachable

    def unreachable(self, error: str) -> None:
        """No broker answered (``error``: what the client said last)."""
        now = self._clock()
        self.status.last_error = error
        if self.status.reachable:
            self._down_at = self._reminded_at = now
            self.status.reachable = False
            self.status.unreachable_since_ms = self._wall_ms()
            self.status.outages += 1
            self.metrics.log_reachable.labels(self.metrics.job).set(0)
            self.metrics.log_outages.labels(self.metrics.job).inc()
            log.warning(
                "the Kafka log at %s is unreachable (%s): retrying until it answers, then "
                "resuming from the last committed snapshot; nothing committed is lost or "
                "applied twice, and commits of barriers already read go on",
                self.bootstrap,
                error,
            )
        elif now - self._reminded_at >= self.remind_every_s:
            self._reminded_at = now
            log.warning(
                "the Kafka log at %s is still unreachable after %.0f s (%s); retrying",
                self.bootstrap,
                now - self._down_at,
                error,
            )

    def reached(self) -> None:
        """A broker answered."""
        if self.status.reachable:
            return
        self.status.reachable = True
        self.status.unreachable_since_ms = None
        self.metrics.log_reachable.labels(self.metrics.job).set(1)
        log.warning(
            "the Kafka log at %s answers again after %.1f s unreachable; resuming",
            self.bootstrap,
            self._clock() - self._down_at,
        )
