"""A job registered with the MetaService, heartbeating in the background.

Its own module beside the client (which hands it out from `MetaClient.running_job`), so
that each stays short; it is part of the client's public API (`bridge.meta.client`).
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from bridge.meta.errors import MetaError, MetaUnavailable
from bridge.meta.models import BarrierRecord, Job

log = logging.getLogger(__name__)


class JobCalls(Protocol):
    """The two calls of `MetaClient` a handle makes (a protocol, so this module does not
    import the client that imports it)."""

    def heartbeat(self, job_id: str) -> Job: ...

    def report_barrier(
        self,
        table: str,
        barrier: int,
        snapshot_id: int | None = None,
        *,
        job_id: str | None = None,
        completed_at_ms: int | None = None,
    ) -> BarrierRecord: ...


class JobHandle:
    """A registered job with a background heartbeat thread (`MetaClient.running_job`).

    The thread heartbeats every `interval_s`; a transient failure is logged and retried
    (the service's heartbeat timeout decides), a job the service ended elsewhere stops
    the thread and is kept in `error`.

    Args:
        client: the client the job was registered with.
        job: the registered job.
        interval_s: seconds between heartbeats (None: a third of the job's timeout).

    Example:
        >>> with client.running_job("worker", ["db.orders"], ["db.totals"]) as job:
        ...     job.report_barrier("db.totals", barrier=1764320000000, snapshot_id=7)
    """

    def __init__(self, client: JobCalls, job: Job, interval_s: float | None) -> None:
        self.client = client
        self.job = job
        self.job_id = job.job_id
        self._interval = interval_s or max(0.05, job.heartbeat_timeout_ms / 3000)
        self._stop = threading.Event()
        self.error: MetaError | None = None
        self._thread = threading.Thread(
            target=self._beat, name=f"dts-meta-heartbeat-{job.job_id}", daemon=True
        )
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.client.heartbeat(self.job_id)
            except MetaUnavailable as e:  # transient: keep trying until the timeout decides
                log.warning("heartbeat of %s failed: %s", self.job_id, e)
            except MetaError as e:  # marked failed/finished elsewhere: stop beating
                self.error = e
                log.error("job %s lost its registration: %s", self.job_id, e)
                return

    def report_barrier(self, table: str, barrier: int, snapshot_id: int | None) -> BarrierRecord:
        """Report, as this job, that `table` completed `barrier`.

        Args:
            table: the table committed (`db.t`).
            barrier: the barrier its snapshot carries.
            snapshot_id: the snapshot committed for it.

        Returns:
            The barrier as the service recorded it.
        """
        return self.client.report_barrier(table, barrier, snapshot_id, job_id=self.job_id)

    def stop(self) -> None:
        """Stop heartbeating (the job stays registered until finished)."""
        self._stop.set()
        self._thread.join(timeout=5)
