"""The worker's link to the MetaService: job registration, heartbeats, barrier reports.

Job identity: one MetaService job per (worker deployment, table), id
``worker:<group>:<table>``, kind ``worker``, role ``flusher``, sinks ``[table]``,
no sources (the worker materializes the table's own log, so it adds no lineage).
Every process of a deployment registers the same job for each table it consumes;
the MetaService lets a registration with the same id, kind, role and tables
re-attach to the running job, so the processes of one group share it (and all
heartbeat it) instead of refusing each other, and a table found later by the
catalog scan gets its own job without touching the others. The job that writes
the table's log (a Spark ``target.tier=log`` query, role ``log-writer``) runs
beside it; a different deployment flushing the same table (a second flusher) or a
FileStore-tier writer of the table (two sources of truth) is refused.

Nothing here may stop a commit: every call runs on a background thread.
Reports are queued (bounded) and sent in order; while the service is down they
wait and are retried, counted in ``dts_worker_meta_errors_total``; anything
dropped from a full queue is recovered by ``dts meta rebuild``. A refused
registration (another worker group flushes the table, or a FileStore-tier writer
holds it) is logged and the table's barriers are reported without a job id; the
registration is retried now and then.

Jobs are not finished when a process stops: other processes of the group may
still run. They lapse by heartbeat timeout (``heartbeat_timeout_ms``) once the
whole deployment is gone; a process that finds its job ended registers again.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from bridge.meta.errors import (
    CycleError,
    JobAlreadyExists,
    JobNotFound,
    JobNotRunning,
    MetaError,
    MetaUnavailable,
    WriterConflict,
)
from bridge.meta.models import JobKind, SinkRole, TableBarrierReport
from bridge.worker.metrics import WorkerMetrics

log = logging.getLogger(__name__)

MAX_JOB_ID = 128


class MetaClientLike(Protocol):
    """The part of ``bridge.meta.client.MetaClient`` the link uses."""

    def register_job(
        self,
        kind: Any,
        sources: Any = (),
        sinks: Any = (),
        *,
        job_id: str | None = None,
        heartbeat_timeout_ms: int | None = None,
        description: str = "",
        role: Any = ...,
    ) -> Any: ...

    def heartbeat(self, job_id: str) -> Any: ...

    def report_barriers(self, reports: Any, chunk: int = 5000) -> int: ...

    def close(self) -> None: ...


def worker_job_id(group: str, table: str) -> str:
    """``worker:<group>:<table>``, shortened with a stable hash past the id limit."""
    job_id = f"worker:{group}:{table}"
    if len(job_id) <= MAX_JOB_ID:
        return job_id
    digest = hashlib.sha1(job_id.encode()).hexdigest()[:12]
    return f"{job_id[: MAX_JOB_ID - 13]}-{digest}"


@dataclass
class _TableLink:
    table: str
    job_id: str
    registered: bool = False
    refused: str | None = None  # why the MetaService refused the job (reports go anonymous)
    next_register_s: float = 0.0
    next_send_s: float = 0.0
    pending: deque[TableBarrierReport] = field(default_factory=deque)


class MetaLink:
    """Background registration, heartbeats and barrier reports for one worker process."""

    def __init__(
        self,
        client: MetaClientLike,
        group: str,
        metrics: WorkerMetrics,
        *,
        heartbeat_interval_s: float = 2.0,
        heartbeat_timeout_ms: int | None = None,
        retry_s: float = 2.0,
        refused_retry_s: float = 30.0,
        max_pending: int = 100_000,
        description: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.group = group
        self.metrics = metrics
        self.heartbeat_interval_s = heartbeat_interval_s
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.retry_s = retry_s
        self.refused_retry_s = refused_retry_s
        self.max_pending = max_pending
        self.description = description
        self._clock = clock
        self._tables: dict[str, _TableLink] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._next_beat = 0.0
        self._thread: threading.Thread | None = None

    # -- called by the worker (never blocks on the network) ------------------------

    def add_table(self, table: str) -> None:
        with self._lock:
            if table not in self._tables:
                self._tables[table] = _TableLink(table, worker_job_id(self.group, table))
        self._wake.set()

    def job_id(self, table: str) -> str:
        return worker_job_id(self.group, table)

    def report(self, table: str, barrier: int, snapshot_id: int | None) -> None:
        """Queue ``table`` completed ``barrier`` as ``snapshot_id`` (sent in the background)."""
        self.add_table(table)
        now_ms = int(time.time() * 1000)
        with self._lock:
            link = self._tables[table]
            link.pending.append(
                TableBarrierReport(
                    table=table,
                    barrier=barrier,
                    snapshot_id=snapshot_id,
                    job_id=None,  # set when sent: the job may (re)register meanwhile
                    completed_at_ms=now_ms,
                )
            )
            dropped = len(link.pending) - self.max_pending
            for _ in range(max(dropped, 0)):
                link.pending.popleft()
            self._set_pending_gauge()
        if dropped > 0:
            self._error("dropped", table)
            log.warning(
                "MetaService unreachable for long: dropped %d barrier reports of %s "
                "(run `dts meta rebuild` to backfill them)",
                dropped,
                table,
            )
        self._wake.set()

    @property
    def pending(self) -> int:
        with self._lock:
            return sum(len(t.pending) for t in self._tables.values())

    def registered(self, table: str) -> bool:
        with self._lock:
            link = self._tables.get(table)
            return bool(link and link.registered)

    def refusal(self, table: str) -> str | None:
        """Why the MetaService refused the table's job (it names the job holding the
        table), None unless refused."""
        with self._lock:
            link = self._tables.get(table)
            return link.refused if link else None

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> MetaLink:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="dts-worker-meta", daemon=True)
            self._thread.start()
        return self

    def close(self, flush_timeout_s: float = 2.0) -> None:
        """Try to send what is queued for a little while, then stop (jobs stay running)."""
        deadline = self._clock() + flush_timeout_s
        while self.pending and self._clock() < deadline and self._thread is not None:
            self._wake.set()
            time.sleep(0.05)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.client.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # never let the thread die: the next tick retries
                log.exception("MetaService link: unexpected error")
            self._wake.wait(timeout=min(0.5, self.heartbeat_interval_s))
            self._wake.clear()

    def tick(self) -> None:
        """One round: register what is due, heartbeat when due, send queued reports."""
        now = self._clock()
        with self._lock:
            links = list(self._tables.values())
        for link in links:
            if not link.registered and now >= link.next_register_s:
                self._register(link)
        if now >= self._next_beat:
            self._next_beat = now + self.heartbeat_interval_s
            for link in links:
                if link.registered:
                    self._heartbeat(link)
        for link in links:
            self._send(link)

    # -- one call each ---------------------------------------------------------------

    def _register(self, link: _TableLink) -> None:
        try:
            self.client.register_job(
                JobKind.WORKER,
                (),
                [link.table],
                job_id=link.job_id,
                heartbeat_timeout_ms=self.heartbeat_timeout_ms,
                description=self.description,
                role=SinkRole.FLUSHER,
            )
        except (WriterConflict, CycleError, JobAlreadyExists) as e:
            if link.refused is None:
                log.error(
                    "MetaService refused job %s for %s: %s; committing on, reporting its "
                    "barriers without a job id",
                    link.job_id,
                    link.table,
                    e,
                )
            link.refused = str(e)
            link.next_register_s = self._clock() + self.refused_retry_s
            self._error("refused", link.table)
            return
        except MetaError as e:
            self._unavailable(link, "register", e)
            return
        if link.refused is not None:
            log.info("MetaService accepted job %s after an earlier refusal", link.job_id)
        link.registered, link.refused = True, None
        log.info("MetaService: %s registered as job %s", link.table, link.job_id)

    def _heartbeat(self, link: _TableLink) -> None:
        try:
            self.client.heartbeat(link.job_id)
        except (JobNotRunning, JobNotFound) as e:
            # timed out (e.g. a long pause) or ended by an operator: register again
            log.warning(
                "MetaService job %s lost its registration (%s); re-registering", link.job_id, e
            )
            link.registered, link.next_register_s = False, 0.0
            self._error("lost", link.table)
        except MetaError as e:
            self._unavailable(link, "heartbeat", e)

    def _send(self, link: _TableLink) -> None:
        if not link.pending or not (link.registered or link.refused is not None):
            return  # wait for the registration, so reports name their job
        if self._clock() < link.next_send_s:
            return
        job_id = link.job_id if link.registered else None
        with self._lock:
            batch = [r.model_copy(update={"job_id": job_id}) for r in link.pending]
        try:
            self.client.report_barriers(batch)
        except (JobNotRunning, JobNotFound, WriterConflict) as e:
            log.warning(
                "MetaService refused barrier reports of %s: %s; re-registering", link.table, e
            )
            link.registered, link.next_register_s = False, 0.0
            self._error("lost", link.table)
            return
        except MetaError as e:
            self._unavailable(link, "report", e)
            link.next_send_s = self._clock() + self.retry_s
            return
        with self._lock:
            for _ in batch:  # the thread is the only consumer: these are the oldest
                link.pending.popleft()
            self._set_pending_gauge()

    def _unavailable(self, link: _TableLink, what: str, e: MetaError) -> None:
        kind = "unavailable" if isinstance(e, MetaUnavailable) else "error"
        self._error(kind, link.table)
        link.next_register_s = self._clock() + self.retry_s
        log.warning("MetaService %s for %s failed (retrying): %s", what, link.table, e)

    def _error(self, kind: str, table: str) -> None:
        self.metrics.meta_errors.labels(table, self.metrics.job, kind).inc()

    def _set_pending_gauge(self) -> None:
        total = sum(len(t.pending) for t in self._tables.values())
        self.metrics.meta_pending_reports.labels(self.metrics.job).set(total)
