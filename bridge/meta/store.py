"""The MetaService's storage: jobs, lineage and per-table completed barriers in SQL.

SQLite (a file under the warehouse) by default, PostgreSQL by URL. Several
service instances on one database behave as one because every decision is made
inside one database transaction:

- a registration first takes the database-wide registration lock (an UPDATE
  of the single ``dts_meta_lock`` row: a row lock on PostgreSQL, the database
  write lock on SQLite where write transactions start with ``BEGIN IMMEDIATE``),
  then checks and writes; so two registrations that would together close a
  cycle or double a writer are serialized, never both accepted;
- "one running writer per table" and "one running flusher per table" are also
  primary keys (``dts_writers.table_name``, ``dts_flushers.table_name``).

Roles (``SinkRole``): a ``writer`` commits into the table's FileStore, a
``log-writer`` writes the table's log, a ``flusher`` (the Faust worker) moves that
log into the FileStore. A writer or log writer takes the table's writer slot, a
flusher its flusher slot; a writer beside a flusher is refused (both would commit
the FileStore), a log writer beside a flusher is the normal log-table pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bridge.meta.barrier_store import BarrierLog
from bridge.meta.consistency import BarrierPoint
from bridge.meta.db import create_schema, default_url, make_engines, now_ms
from bridge.meta.job_store import JobRegistry
from bridge.meta.models import (
    BarrierRecord,
    ConsistencyMode,
    ConsistentVersion,
    Job,
    JobSpec,
    JobState,
    Lineage,
    LineageEdge,
    TableBarrierReport,
    TableStatus,
    Trace,
)
from bridge.meta.table_views import MetricsView, RunningJob, TableGroup, TableViews

__all__ = ["DEFAULT_HEARTBEAT_TIMEOUT_MS", "MetricsView", "RunningJob", "Store", "TableGroup",
           "default_url"]  # fmt: skip

DEFAULT_HEARTBEAT_TIMEOUT_MS = 30_000


class Store:
    """The MetaService's state, kept by three parts over one database: ``jobs``
    (registrations, slots, heartbeats), ``barrier_log`` (completed barriers) and
    ``views`` (statuses, lineage, consistency, metrics). Its methods are the service's
    operations; each is one database transaction."""

    def __init__(
        self,
        url: str,
        *,
        heartbeat_timeout_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.url = url
        self._write, self._read = make_engines(url)
        create_schema(self._write)
        self.jobs = JobRegistry(self._write, self._read, clock, heartbeat_timeout_ms)
        self.barrier_log = BarrierLog(self._write, self._read, clock, self.jobs)
        self.views = TableViews(self._read, clock, self.jobs)

    @classmethod
    def for_warehouse(cls, warehouse: str | Path, **kwargs: Any) -> Store:
        return cls(default_url(warehouse), **kwargs)

    @property
    def heartbeat_timeout_ms(self) -> int:
        return self.jobs.heartbeat_timeout_ms

    @property
    def database_kind(self) -> str:
        """'sqlite' or 'postgresql': what /health may say about the database."""
        return str(self._write.dialect.name)

    @property
    def safe_url(self) -> str:
        return sa.make_url(self.url).render_as_string(hide_password=True)

    def close(self) -> None:
        self._write.dispose()
        self._read.dispose()

    # jobs
    def register_job(self, spec: JobSpec) -> Job:
        return self.jobs.register_job(spec)

    def get_job(self, job_id: str) -> Job:
        return self.jobs.get_job(job_id)

    def list_jobs(self, state: JobState | None = None) -> list[Job]:
        return self.jobs.list_jobs(state)

    def heartbeat(self, job_id: str) -> Job:
        return self.jobs.heartbeat(job_id)

    def end_job(self, job_id: str, state: JobState, reason: str = "") -> Job:
        return self.jobs.end_job(job_id, state, reason)

    def forget_job(self, job_id: str) -> None:
        self.jobs.forget_job(job_id)

    def sweep(self) -> list[str]:
        return self.jobs.sweep()

    # barriers
    def report_barrier(
        self, report: TableBarrierReport, *, anonymous_ok: bool = True
    ) -> BarrierRecord:
        return self.barrier_log.report_barrier(report, anonymous_ok=anonymous_ok)

    def report_barriers(
        self, reports: Sequence[TableBarrierReport], *, anonymous_ok: bool = True
    ) -> int:
        return self.barrier_log.report_barriers(reports, anonymous_ok=anonymous_ok)

    def clear_barriers(self, table: str) -> int:
        return self.barrier_log.clear_barriers(table)

    def barriers(
        self, table: str, limit: int = 100, before: int | None = None
    ) -> list[BarrierRecord]:
        return self.barrier_log.barriers(table, limit, before)

    def prune_barriers(self, keep: int) -> int:
        return self.barrier_log.prune_barriers(keep)

    # views
    def tables(self) -> list[TableStatus]:
        return self.views.tables()

    def table(self, name: str) -> TableStatus:
        return self.views.table(name)

    def edges(self) -> list[LineageEdge]:
        return self.views.edges()

    def metrics_view(self) -> MetricsView:
        return self.views.metrics_view()

    def consistent_version(
        self, tables: Sequence[str], mode: ConsistencyMode = ConsistencyMode.STRONG
    ) -> ConsistentVersion:
        return self.views.consistent_version(tables, mode)

    def consistent_points(self) -> dict[str, BarrierPoint | None]:
        return self.views.consistent_points()

    def lineage(self, table: str) -> Lineage:
        return self.views.lineage(table)

    def trace(self, table: str) -> Trace:
        return self.views.trace(table)
