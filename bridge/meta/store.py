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

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from bridge.meta import graph
from bridge.meta.consistency import BarrierPoint, consistent_version, trace_lag
from bridge.meta.errors import (
    CycleError,
    Forbidden,
    InvalidRequest,
    JobAlreadyExists,
    JobNotFound,
    JobNotRunning,
    TableNotFound,
    WriterConflict,
)
from bridge.meta.models import (
    BarrierRecord,
    ConsistencyMode,
    ConsistentVersion,
    Job,
    JobKind,
    JobSpec,
    JobState,
    Lineage,
    LineageEdge,
    SinkRole,
    TableBarrierReport,
    TableStatus,
    Trace,
)

DEFAULT_HEARTBEAT_TIMEOUT_MS = 30_000
REPORT_CHUNK = 500

metadata = sa.MetaData()
meta_lock = sa.Table(
    "dts_meta_lock",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("version", sa.BigInteger, nullable=False),
)
jobs_t = sa.Table(
    "dts_jobs",
    metadata,
    sa.Column("job_id", sa.String(128), primary_key=True),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("state", sa.String(16), nullable=False, index=True),
    sa.Column("description", sa.Text, nullable=False, default=""),
    sa.Column("registered_at_ms", sa.BigInteger, nullable=False),
    sa.Column("heartbeat_at_ms", sa.BigInteger, nullable=False),
    sa.Column("ended_at_ms", sa.BigInteger, nullable=True),
    sa.Column("reason", sa.Text, nullable=False, default=""),
    sa.Column("heartbeat_timeout_ms", sa.BigInteger, nullable=False),
    # SinkRole of the job's sinks; added after the first release (see _add_role_column)
    sa.Column("role", sa.String(16), nullable=False, server_default=SinkRole.WRITER.value),
)
job_tables_t = sa.Table(
    "dts_job_tables",
    metadata,
    sa.Column("job_id", sa.String(128), primary_key=True),
    sa.Column("table_name", sa.String(255), primary_key=True),
    sa.Column("role", sa.String(8), primary_key=True),  # "source" | "sink"
    sa.Index("ix_dts_job_tables_table", "table_name"),
)
writers_t = sa.Table(
    "dts_writers",
    metadata,
    sa.Column("table_name", sa.String(255), primary_key=True),  # one running writer per table
    sa.Column("job_id", sa.String(128), nullable=False, index=True),
)
flushers_t = sa.Table(
    "dts_flushers",
    metadata,
    sa.Column("table_name", sa.String(255), primary_key=True),  # one running flusher per table
    sa.Column("job_id", sa.String(128), nullable=False, index=True),
)
barriers_t = sa.Table(
    "dts_table_barriers",
    metadata,
    sa.Column("table_name", sa.String(255), primary_key=True),
    sa.Column("barrier", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("snapshot_id", sa.BigInteger, nullable=True),
    sa.Column("completed_at_ms", sa.BigInteger, nullable=False),
    sa.Column("job_id", sa.String(128), nullable=True),
)


@dataclass(frozen=True)
class RunningJob:
    job_id: str
    kind: str
    heartbeat_at_ms: int
    heartbeat_timeout_ms: int


@dataclass(frozen=True)
class TableGroup:
    """A connected component of the lineage graph, named after its root table(s)."""

    name: str
    tables: tuple[str, ...]
    # The greatest barrier completed by every table of the group; None while some table
    # has none or they share none (unrelated sources).
    consistent_barrier: int | None


@dataclass(frozen=True)
class MetricsView:
    """What ``/metrics`` reports, read in one transaction."""

    now_ms: int
    jobs_by_state: dict[str, int]
    running: list[RunningJob]
    latest_barrier: dict[str, int]  # table -> latest completed barrier
    depth: dict[str, int]  # table -> lineage depth (0 = root)
    groups: list[TableGroup]


_SLOT_NAMES = {
    SinkRole.WRITER: "writer",
    SinkRole.LOG_WRITER: "writer",
    SinkRole.FLUSHER: "flusher",
}


def _conflict(role: SinkRole, holder: SinkRole) -> str | None:
    """Why a new job of ``role`` may not run beside a running ``holder`` of the same table
    (None: they coexist; only a log writer and a flusher do)."""
    if SinkRole.FLUSHER not in (role, holder):
        return "a table has at most one running writer"
    if role is holder:
        return "a table has at most one running flusher (one worker group)"
    if SinkRole.WRITER in (role, holder):
        return (
            "a FileStore-tier writer beside a flusher would make two sources of truth for "
            "the table's FileStore (write its log instead: target.tier=log, role log-writer)"
        )
    return None


def _add_role_column(conn: Connection) -> None:
    """Databases created before roles existed lack ``dts_jobs.role``: their jobs are
    writers (the only role then). Idempotent; a lost race with another instance fails
    the transaction and ``_create_schema`` retries."""
    columns = {c["name"] for c in sa.inspect(conn).get_columns(jobs_t.name)}
    if "role" not in columns:
        conn.exec_driver_sql(
            f"ALTER TABLE {jobs_t.name} ADD COLUMN role VARCHAR(16) NOT NULL "
            f"DEFAULT '{SinkRole.WRITER.value}'"
        )


def default_url(warehouse: str | Path) -> str:
    """The embedded default: ``<warehouse>/_meta/meta.db``."""
    return f"sqlite:///{Path(warehouse).resolve() / '_meta' / 'meta.db'}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def make_engines(url: str) -> tuple[Engine, Engine]:
    """(write engine, read engine) for ``url``; the same engine twice on PostgreSQL."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database in ("", ":memory:"):
            raise InvalidRequest("an in-memory SQLite database cannot be shared; give a file path")
        Path(database).parent.mkdir(parents=True, exist_ok=True)
        return _sqlite_engine(parsed, "BEGIN IMMEDIATE"), _sqlite_engine(parsed, "BEGIN")
    if parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() in ("", "psycopg2"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    engine = sa.create_engine(parsed, isolation_level="READ COMMITTED", pool_pre_ping=True)
    return engine, engine


def _sqlite_engine(url: sa.URL, begin: str) -> Engine:
    engine = sa.create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

    # pysqlite's own transaction handling starts transactions lazily (reads before the
    # first write run outside of it); take control so a transaction is a transaction.
    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA busy_timeout=30000")
        # WAL + NORMAL survives a process crash; a power loss may drop the last reports,
        # which `dts meta rebuild` restores from the FileStore.
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql(begin)

    return engine


class Store:
    """Jobs, lineage and barrier progress; every method is one database transaction."""

    def __init__(
        self,
        url: str,
        *,
        heartbeat_timeout_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS,
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        self.url = url
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self._clock = clock
        self._write, self._read = make_engines(url)
        self._create_schema()

    @classmethod
    def for_warehouse(cls, warehouse: str | Path, **kwargs: Any) -> Store:
        return cls(default_url(warehouse), **kwargs)

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

    def _create_schema(self) -> None:
        # Several instances may start at once on one database: creating is idempotent,
        # and a lost race on the lock row or a table is harmless.
        for attempt in range(3):
            try:
                with self._write.begin() as conn:
                    metadata.create_all(conn, checkfirst=True)
                    _add_role_column(conn)
                    if conn.execute(sa.select(meta_lock.c.id)).first() is None:
                        conn.execute(meta_lock.insert().values(id=1, version=0))
                return
            except sa.exc.DBAPIError:
                if attempt == 2:
                    raise
                time.sleep(0.1 * (attempt + 1))

    @contextmanager
    def _registration(self) -> Iterator[tuple[Connection, int]]:
        """A write transaction holding the database-wide registration lock."""
        with self._write.begin() as conn:
            conn.execute(
                meta_lock.update()
                .where(meta_lock.c.id == 1)
                .values(version=meta_lock.c.version + 1)
            )
            now = self._clock()
            self._sweep(conn, now)
            yield conn, now

    # ---- jobs ---------------------------------------------------------------------------

    def register_job(self, spec: JobSpec) -> Job:
        """Register (or re-attach to) a job; refuses a cycle, a second writer or flusher of
        a table, or a writer beside a flusher (see :class:`SinkRole`)."""
        job_id = spec.job_id or f"{spec.kind.value}-{uuid.uuid4().hex[:12]}"
        sources = list(dict.fromkeys(spec.sources))
        sinks = list(dict.fromkeys(spec.sinks))
        for t in sinks:
            if t in sources and spec.role is not SinkRole.FLUSHER:
                raise CycleError(
                    f"job {job_id} would read and write {t}: a cycle {t} -> {t}", path=[t, t]
                )
        for attempt in range(3):
            try:
                return self._register(job_id, spec, sources, sinks)
            except IntegrityError:
                # Only reachable when another instance won a race the lock did not cover;
                # the retry sees its rows and refuses with a named reason.
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _register(self, job_id: str, spec: JobSpec, sources: list[str], sinks: list[str]) -> Job:
        with self._registration() as (conn, now):
            existing = self._job(conn, job_id)
            if existing is not None and existing.state is JobState.RUNNING:
                same = (
                    existing.kind,
                    existing.role,
                    sorted(existing.sources),
                    sorted(existing.sinks),
                ) == (spec.kind, spec.role, sorted(sources), sorted(sinks))
                if not same:
                    raise JobAlreadyExists(
                        f"job {job_id} is already running as {existing.role.value} with sources "
                        f"{existing.sources} and sinks {existing.sinks}; finish it first or use "
                        "another job id",
                        job_id=job_id,
                    )
                self._touch(conn, job_id, now)  # a restarted process re-attaches
                return self._job_or_raise(conn, job_id)
            self._check_slots(conn, job_id, spec.role, sinks, now)
            # a flusher only moves its sinks' own logs into the FileStore: its sources (if it
            # names any) are kept on the job but make no lineage edges (see _edges)
            new_edges = (
                [] if spec.role is SinkRole.FLUSHER else [(s, t) for s in sources for t in sinks]
            )
            existing_edges = [(e.source, e.sink) for e in self._edges(conn) if e.job_id != job_id]
            cycle = graph.find_cycle(existing_edges, new_edges)
            if cycle is not None:
                raise CycleError(
                    f"job {job_id} would make a cycle in the table graph: {' -> '.join(cycle)}",
                    path=cycle,
                )
            timeout = spec.heartbeat_timeout_ms or self.heartbeat_timeout_ms
            row = {
                "kind": spec.kind.value,
                "state": JobState.RUNNING.value,
                "description": spec.description,
                "registered_at_ms": now,
                "heartbeat_at_ms": now,
                "ended_at_ms": None,
                "reason": "",
                "heartbeat_timeout_ms": timeout,
                "role": spec.role.value,
            }
            if existing is None:
                conn.execute(jobs_t.insert().values(job_id=job_id, **row))
            else:  # a finished/failed job registered again under its id: a new run
                conn.execute(jobs_t.update().where(jobs_t.c.job_id == job_id).values(**row))
                conn.execute(job_tables_t.delete().where(job_tables_t.c.job_id == job_id))
            rows = [{"job_id": job_id, "table_name": t, "role": "source"} for t in sources]
            rows += [{"job_id": job_id, "table_name": t, "role": "sink"} for t in sinks]
            conn.execute(job_tables_t.insert(), rows)
            slot = flushers_t if spec.role is SinkRole.FLUSHER else writers_t
            conn.execute(slot.insert(), [{"table_name": t, "job_id": job_id} for t in sinks])
            return self._job_or_raise(conn, job_id)

    def _check_slots(
        self, conn: Connection, job_id: str, role: SinkRole, sinks: list[str], now: int
    ) -> None:
        """Refuse ``role`` on ``sinks`` where a running job holds a slot it conflicts with,
        naming that job (the first such table in name order)."""
        held = [*self._holders(conn, writers_t, sinks), *self._holders(conn, flushers_t, sinks)]
        for m in sorted(held, key=lambda m: m["table_name"]):
            holder = SinkRole(m["role"])
            why = _conflict(role, holder)
            if why is None:
                continue
            age = now - m["heartbeat_at_ms"]
            raise WriterConflict(
                f"{m['table_name']} already has a running {_SLOT_NAMES[holder]}: job "
                f"{m['job_id']} ({m['kind']}, {holder.value}, last heartbeat {age} ms ago); "
                f"{why}; finish or cancel it first "
                f"(dts meta jobs finish {m['job_id']} --state cancelled)",
                table=m["table_name"],
                job_id=m["job_id"],
                role=holder.value,
                requested_by=job_id,
                requested_role=role.value,
            )

    def _holders(self, conn: Connection, slot: sa.Table, sinks: list[str]) -> list[Any]:
        return [
            r._mapping
            for r in conn.execute(
                sa.select(slot.c.table_name, jobs_t)
                .join(jobs_t, jobs_t.c.job_id == slot.c.job_id)
                .where(slot.c.table_name.in_(sinks))
            )
        ]

    def get_job(self, job_id: str) -> Job:
        self.sweep()
        with self._read.begin() as conn:
            return self._job_or_raise(conn, job_id)

    def list_jobs(self, state: JobState | None = None) -> list[Job]:
        self.sweep()
        with self._read.begin() as conn:
            q = sa.select(jobs_t.c.job_id).order_by(jobs_t.c.registered_at_ms, jobs_t.c.job_id)
            if state is not None:
                q = q.where(jobs_t.c.state == state.value)
            ids = list(conn.execute(q).scalars())
            return self._jobs(conn, ids)

    def heartbeat(self, job_id: str) -> Job:
        """Record that the job is alive; refused once it was marked failed/finished."""
        with self._write.begin() as conn:
            now = self._clock()
            self._sweep(conn, now)
            job = self._job_or_raise(conn, job_id)
            if job.state is not JobState.RUNNING:
                raise JobNotRunning(
                    f"job {job_id} is {job.state.value}"
                    + (f" ({job.reason})" if job.reason else "")
                    + "; register it again to resume",
                    job_id=job_id,
                    state=job.state.value,
                )
            self._touch(conn, job_id, now)
            return self._job_or_raise(conn, job_id)

    def end_job(self, job_id: str, state: JobState, reason: str = "") -> Job:
        """Mark the job finished/failed/cancelled; frees its tables (its lineage stays)."""
        if state is JobState.RUNNING:
            raise InvalidRequest("a job ends as finished, failed or cancelled, not running")
        with self._registration() as (conn, now):
            job = self._job_or_raise(conn, job_id)
            if job.state is not JobState.RUNNING:
                if job.state is state:
                    return job  # idempotent
                raise JobNotRunning(
                    f"job {job_id} already ended as {job.state.value}",
                    job_id=job_id,
                    state=job.state.value,
                )
            self._end(conn, [job_id], state, reason, now)
            return self._job_or_raise(conn, job_id)

    def forget_job(self, job_id: str) -> None:
        """Delete an ended job and its lineage edges (an escape hatch for mistakes)."""
        with self._registration() as (conn, _now):
            job = self._job_or_raise(conn, job_id)
            if job.state is JobState.RUNNING:
                raise JobNotRunning(
                    f"job {job_id} is running; finish or cancel it before forgetting it",
                    job_id=job_id,
                    state=job.state.value,
                )
            conn.execute(job_tables_t.delete().where(job_tables_t.c.job_id == job_id))
            conn.execute(jobs_t.delete().where(jobs_t.c.job_id == job_id))

    def sweep(self) -> list[str]:
        """Mark running jobs whose heartbeat timed out as failed; returns their ids."""
        with self._write.begin() as conn:
            return self._sweep(conn, self._clock())

    def _sweep(self, conn: Connection, now: int) -> list[str]:
        expired = list(
            conn.execute(
                sa.select(jobs_t.c.job_id, jobs_t.c.heartbeat_at_ms, jobs_t.c.heartbeat_timeout_ms)
                .where(jobs_t.c.state == JobState.RUNNING.value)
                .where(jobs_t.c.heartbeat_at_ms + jobs_t.c.heartbeat_timeout_ms < now)
            )
        )
        for job_id, beat, timeout in expired:
            self._end(
                conn,
                [job_id],
                JobState.FAILED,
                f"heartbeat timeout: no heartbeat for {now - beat} ms (timeout {timeout} ms)",
                now,
            )
        return [row[0] for row in expired]

    def _end(
        self, conn: Connection, job_ids: list[str], state: JobState, reason: str, now: int
    ) -> None:
        conn.execute(
            jobs_t.update()
            .where(jobs_t.c.job_id.in_(job_ids))
            .where(jobs_t.c.state == JobState.RUNNING.value)
            .values(state=state.value, ended_at_ms=now, reason=reason)
        )
        conn.execute(writers_t.delete().where(writers_t.c.job_id.in_(job_ids)))
        conn.execute(flushers_t.delete().where(flushers_t.c.job_id.in_(job_ids)))

    def _touch(self, conn: Connection, job_id: str, now: int) -> None:
        conn.execute(jobs_t.update().where(jobs_t.c.job_id == job_id).values(heartbeat_at_ms=now))

    def _job(self, conn: Connection, job_id: str) -> Job | None:
        found = self._jobs(conn, [job_id])
        return found[0] if found else None

    def _job_or_raise(self, conn: Connection, job_id: str) -> Job:
        job = self._job(conn, job_id)
        if job is None:
            raise JobNotFound(f"no job {job_id!r} is registered", job_id=job_id)
        return job

    def _jobs(self, conn: Connection, ids: Sequence[str]) -> list[Job]:
        if not ids:
            return []
        tables: dict[str, dict[str, list[str]]] = {i: {"source": [], "sink": []} for i in ids}
        for chunk in _chunks(list(ids), REPORT_CHUNK):
            for job_id, name, role in conn.execute(
                sa.select(job_tables_t.c.job_id, job_tables_t.c.table_name, job_tables_t.c.role)
                .where(job_tables_t.c.job_id.in_(chunk))
                .order_by(job_tables_t.c.table_name)
            ):
                tables[job_id][role].append(name)
        rows = {}
        for chunk in _chunks(list(ids), REPORT_CHUNK):
            for r in conn.execute(sa.select(jobs_t).where(jobs_t.c.job_id.in_(chunk))):
                rows[r.job_id] = r._mapping
        return [
            Job(
                job_id=i,
                kind=JobKind(rows[i]["kind"]),
                sources=tables[i]["source"],
                sinks=tables[i]["sink"],
                role=SinkRole(rows[i]["role"]),
                state=JobState(rows[i]["state"]),
                description=rows[i]["description"],
                registered_at_ms=rows[i]["registered_at_ms"],
                heartbeat_at_ms=rows[i]["heartbeat_at_ms"],
                ended_at_ms=rows[i]["ended_at_ms"],
                reason=rows[i]["reason"],
                heartbeat_timeout_ms=rows[i]["heartbeat_timeout_ms"],
            )
            for i in ids
            if i in rows
        ]

    # ---- barriers -----------------------------------------------------------------------

    def report_barrier(
        self, report: TableBarrierReport, *, anonymous_ok: bool = True
    ) -> BarrierRecord:
        self.report_barriers([report], anonymous_ok=anonymous_ok)
        with self._read.begin() as conn:
            row = conn.execute(
                sa.select(barriers_t)
                .where(barriers_t.c.table_name == report.table)
                .where(barriers_t.c.barrier == report.barrier)
            ).one()
            return _record(row._mapping)

    def report_barriers(
        self, reports: Sequence[TableBarrierReport], *, anonymous_ok: bool = True
    ) -> int:
        """Record completed barriers (idempotent). A report naming a job must come from the
        table's running writer, so a zombie writer that was timed out is refused.
        ``anonymous_ok=False`` (an API caller without the admin token): a report without a
        job id is refused for a table that has a running writer or flusher."""
        if not reports:
            return 0
        with self._write.begin() as conn:
            now = self._clock()
            self._sweep(conn, now)
            if not anonymous_ok:
                self._check_anonymous(conn, reports)
            self._check_reporters(conn, reports, now)
            merged: dict[tuple[str, int], dict[str, Any]] = {}
            for r in reports:
                row = merged.setdefault(
                    (r.table, r.barrier),
                    {
                        "table_name": r.table,
                        "barrier": r.barrier,
                        "snapshot_id": r.snapshot_id,
                        "completed_at_ms": r.completed_at_ms
                        if r.completed_at_ms is not None
                        else now,
                        "job_id": r.job_id,
                    },
                )
                if row["snapshot_id"] is None:
                    row["snapshot_id"] = r.snapshot_id
            for chunk in _chunks(list(merged.values()), REPORT_CHUNK):
                conn.execute(self._upsert(chunk))
        return len(merged)

    def _check_anonymous(self, conn: Connection, reports: Sequence[TableBarrierReport]) -> None:
        for table in sorted({r.table for r in reports if r.job_id is None}):
            holders = [
                conn.execute(sa.select(t.c.job_id).where(t.c.table_name == table)).scalar()
                for t in (flushers_t, writers_t)
            ]
            holder = next((h for h in holders if h is not None), None)
            if holder is not None:
                raise Forbidden(
                    f"table {table} is held by running job {holder}: only that job reports "
                    "its barriers (give its job_id), or use the admin token",
                    table=table,
                    job_id=holder,
                )

    def _check_reporters(
        self, conn: Connection, reports: Sequence[TableBarrierReport], now: int
    ) -> None:
        claimed = {(r.job_id, r.table) for r in reports if r.job_id is not None}
        for job_id, table in sorted(claimed):
            job = self._job_or_raise(conn, job_id)
            if job.state is not JobState.RUNNING:
                raise JobNotRunning(
                    f"job {job_id} is {job.state.value} and may not report barriers of {table}",
                    job_id=job_id,
                    state=job.state.value,
                )
            writer, flusher = (
                conn.execute(sa.select(t.c.job_id).where(t.c.table_name == table)).scalar()
                for t in (writers_t, flushers_t)
            )
            if job_id not in (writer, flusher):
                holders = [
                    f"job {j} is its {n}"
                    for j, n in ((writer, "writer"), (flusher, "flusher"))
                    if j
                ]
                raise WriterConflict(
                    f"job {job_id} is not the writer of {table}"
                    + (f" ({', '.join(holders)})" if holders else ""),
                    table=table,
                    job_id=flusher or writer,
                    requested_by=job_id,
                )
            self._touch(conn, job_id, now)  # a committing job is alive

    def _upsert(self, rows: list[dict[str, Any]]) -> sa.Executable:
        if self._write.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert  # type: ignore[assignment]
        stmt = insert(barriers_t).values(rows)
        # The first snapshot reported for a barrier wins (the committer's; the same one
        # `dts meta rebuild` picks), a late snapshot id fills a gap.
        return stmt.on_conflict_do_update(
            index_elements=[barriers_t.c.table_name, barriers_t.c.barrier],
            set_={
                "snapshot_id": sa.func.coalesce(barriers_t.c.snapshot_id, stmt.excluded.snapshot_id)
            },
        )

    def clear_barriers(self, table: str) -> int:
        with self._write.begin() as conn:
            return conn.execute(
                barriers_t.delete().where(barriers_t.c.table_name == table)
            ).rowcount

    def barriers(
        self, table: str, limit: int = 100, before: int | None = None
    ) -> list[BarrierRecord]:
        """Newest first."""
        with self._read.begin() as conn:
            self._require_tables(conn, [table])
            q = sa.select(barriers_t).where(barriers_t.c.table_name == table)
            if before is not None:
                q = q.where(barriers_t.c.barrier < before)
            q = q.order_by(barriers_t.c.barrier.desc()).limit(limit)
            return [_record(r._mapping) for r in conn.execute(q)]

    def prune_barriers(self, keep: int) -> int:
        """Keep the newest ``keep`` completed barriers per table; returns rows deleted."""
        deleted = 0
        with self._write.begin() as conn:
            for (table,) in conn.execute(sa.select(barriers_t.c.table_name).distinct()).all():
                cutoff = conn.execute(
                    sa.select(barriers_t.c.barrier)
                    .where(barriers_t.c.table_name == table)
                    .order_by(barriers_t.c.barrier.desc())
                    .offset(keep)
                    .limit(1)
                ).scalar()
                if cutoff is not None:
                    deleted += conn.execute(
                        barriers_t.delete()
                        .where(barriers_t.c.table_name == table)
                        .where(barriers_t.c.barrier <= cutoff)
                    ).rowcount
        return deleted

    # ---- tables, lineage, consistency ------------------------------------------------------

    def tables(self) -> list[TableStatus]:
        with self._read.begin() as conn:
            return self._statuses(conn, None)

    def table(self, name: str) -> TableStatus:
        with self._read.begin() as conn:
            self._require_tables(conn, [name])
            return self._statuses(conn, [name])[0]

    def _statuses(self, conn: Connection, only: list[str] | None) -> list[TableStatus]:
        edges = self._edges(conn)
        names = only if only is not None else sorted(self._known_tables(conn))
        stats = sa.select(
            barriers_t.c.table_name,
            sa.func.max(barriers_t.c.barrier).label("latest"),
            sa.func.count().label("n"),
        ).group_by(barriers_t.c.table_name)
        if only is not None:
            stats = stats.where(barriers_t.c.table_name.in_(only))
        sub = stats.subquery()
        latest = {
            r.table_name: r
            for r in conn.execute(
                sa.select(sub, barriers_t.c.snapshot_id, barriers_t.c.completed_at_ms).join(
                    barriers_t,
                    sa.and_(
                        barriers_t.c.table_name == sub.c.table_name,
                        barriers_t.c.barrier == sub.c.latest,
                    ),
                )
            )
        }
        writers = dict(conn.execute(sa.select(writers_t.c.table_name, writers_t.c.job_id)).all())
        flushers = dict(conn.execute(sa.select(flushers_t.c.table_name, flushers_t.c.job_id)).all())
        up, down = graph.adjacency(edges, reverse=True), graph.adjacency(edges)
        out = []
        for name in names:
            r = latest.get(name)
            out.append(
                TableStatus(
                    table=name,
                    latest_barrier=r.latest if r else None,
                    latest_snapshot_id=r.snapshot_id if r else None,
                    latest_completed_at_ms=r.completed_at_ms if r else None,
                    barrier_count=r.n if r else 0,
                    writer_job_id=writers.get(name),
                    flusher_job_id=flushers.get(name),
                    upstream=sorted(up.get(name, {})),
                    downstream=sorted(down.get(name, {})),
                )
            )
        return out

    def edges(self) -> list[LineageEdge]:
        with self._read.begin() as conn:
            return self._edges(conn)

    def _edges(self, conn: Connection) -> list[LineageEdge]:
        src, snk = job_tables_t.alias("src"), job_tables_t.alias("snk")
        q = (
            sa.select(src.c.table_name, snk.c.table_name, jobs_t.c.job_id, jobs_t.c.state)
            .select_from(src)
            .join(snk, sa.and_(snk.c.job_id == src.c.job_id, snk.c.role == "sink"))
            .join(jobs_t, jobs_t.c.job_id == src.c.job_id)
            .where(src.c.role == "source")
            .where(jobs_t.c.role != SinkRole.FLUSHER.value)  # flushers add no lineage
            .order_by(src.c.table_name, snk.c.table_name, jobs_t.c.job_id)
        )
        return [
            LineageEdge(source=s, sink=t, job_id=j, job_state=JobState(st))
            for s, t, j, st in conn.execute(q)
        ]

    def _known_tables(self, conn: Connection) -> set[str]:
        a = set(conn.execute(sa.select(job_tables_t.c.table_name).distinct()).scalars())
        b = set(conn.execute(sa.select(barriers_t.c.table_name).distinct()).scalars())
        return a | b

    def _require_tables(self, conn: Connection, tables: Sequence[str]) -> None:
        missing = [t for t in tables if not self._is_known(conn, t)]
        if missing:
            raise TableNotFound(
                f"unknown table(s) {', '.join(missing)}: no job registered them and no "
                "barrier was reported (run `dts meta rebuild` to load them from the FileStore)",
                tables=missing,
            )

    def _is_known(self, conn: Connection, table: str) -> bool:
        for t, col in (
            (job_tables_t, job_tables_t.c.table_name),
            (barriers_t, barriers_t.c.table_name),
        ):
            if conn.execute(
                sa.select(sa.literal(1)).select_from(t).where(col == table).limit(1)
            ).first():
                return True
        return False

    def metrics_view(self) -> MetricsView:
        """Jobs by state, running jobs' heartbeats, latest barriers and table groups with
        their consistent barrier: the state ``/metrics`` reports, from one read."""
        with self._read.begin() as conn:
            now = self._clock()
            counts = dict.fromkeys((s.value for s in JobState), 0)
            for state, n in conn.execute(
                sa.select(jobs_t.c.state, sa.func.count()).group_by(jobs_t.c.state)
            ):
                counts[state] = n
            running = [
                RunningJob(r.job_id, r.kind, r.heartbeat_at_ms, r.heartbeat_timeout_ms)
                for r in conn.execute(
                    sa.select(
                        jobs_t.c.job_id,
                        jobs_t.c.kind,
                        jobs_t.c.heartbeat_at_ms,
                        jobs_t.c.heartbeat_timeout_ms,
                    )
                    .where(jobs_t.c.state == JobState.RUNNING.value)
                    .order_by(jobs_t.c.job_id)
                )
            ]
            latest = dict(
                conn.execute(
                    sa.select(barriers_t.c.table_name, sa.func.max(barriers_t.c.barrier)).group_by(
                        barriers_t.c.table_name
                    )
                ).all()
            )
            edges = self._edges(conn)
            depth = graph.depths(edges)
            source = _DbBarriers(conn)
            groups = []
            for members in graph.components(edges, latest):
                common: int | None = None
                if all(t in latest for t in members):
                    common = (
                        latest[members[0]] if len(members) == 1 else source.greatest_common(members)
                    )
                groups.append(TableGroup(graph.group_name(members, depth), tuple(members), common))
        return MetricsView(now, counts, running, latest, depth, groups)

    def consistent_version(
        self, tables: Sequence[str], mode: ConsistencyMode = ConsistencyMode.STRONG
    ) -> ConsistentVersion:
        listed = list(dict.fromkeys(tables))
        if not listed:
            raise InvalidRequest("give at least one table")
        with self._read.begin() as conn:
            self._require_tables(conn, listed)
            between: list[str] = []
            if mode is ConsistencyMode.STRONG and len(listed) > 1:
                between = sorted(graph.between(self._edges(conn), listed))
            return consistent_version(_DbBarriers(conn), listed, mode, between=between)

    def lineage(self, table: str) -> Lineage:
        with self._read.begin() as conn:
            self._require_tables(conn, [table])
            edges = self._edges(conn)
        up_adj, down_adj = graph.adjacency(edges, reverse=True), graph.adjacency(edges)
        up, down = graph.lineage_tree(up_adj, table), graph.lineage_tree(down_adj, table)
        related = graph.reachable(up_adj, table) | graph.reachable(down_adj, table) | {table}
        mine = graph.edges_touching(edges, related)
        return Lineage(
            table=table,
            upstream=up,
            downstream=down,
            edges=mine,
            tree=graph.render_tree(table, up, down),
            mermaid=graph.render_mermaid(mine, focus=table),
        )

    def trace(self, table: str) -> Trace:
        with self._read.begin() as conn:
            self._require_tables(conn, [table])
            edges = self._edges(conn)
            related = graph.upstream(edges, table) | {table}
            source = _DbBarriers(conn)
            latest = {t: (p.barrier if (p := source.latest(t)) else None) for t in related}
            writers = self._writers_of(conn, sorted(related))
        return trace_lag(table, edges, latest, writers, self._clock())

    def _writers_of(self, conn: Connection, tables: list[str]) -> dict[str, Job]:
        """Per table: the job producing its data (a writer or log writer: running, else the
        last registered), else its flusher (e.g. a CDC table only a worker flushes)."""
        q = (
            sa.select(job_tables_t.c.table_name, jobs_t.c.job_id)
            .join(jobs_t, jobs_t.c.job_id == job_tables_t.c.job_id)
            .where(job_tables_t.c.role == "sink")
            .where(job_tables_t.c.table_name.in_(tables))
            .order_by(
                (jobs_t.c.role != SinkRole.FLUSHER.value).asc(),
                (jobs_t.c.state == JobState.RUNNING.value).asc(),
                jobs_t.c.registered_at_ms.asc(),
            )
        )
        chosen = {name: job_id for name, job_id in conn.execute(q)}  # the last row wins
        jobs = {j.job_id: j for j in self._jobs(conn, sorted(set(chosen.values())))}
        return {name: jobs[j] for name, j in chosen.items() if j in jobs}


class _DbBarriers:
    """The :class:`~bridge.meta.consistency.BarrierSource` of one read transaction."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def latest(self, table: str) -> BarrierPoint | None:
        row = self._conn.execute(
            sa.select(barriers_t)
            .where(barriers_t.c.table_name == table)
            .order_by(barriers_t.c.barrier.desc())
            .limit(1)
        ).first()
        return _point(row._mapping) if row else None

    def greatest_common(self, tables: Sequence[str]) -> int | None:
        return self._conn.execute(
            sa.select(barriers_t.c.barrier)
            .where(barriers_t.c.table_name.in_(list(tables)))
            .group_by(barriers_t.c.barrier)
            .having(sa.func.count() == len(set(tables)))
            .order_by(barriers_t.c.barrier.desc())
            .limit(1)
        ).scalar()

    def at(self, table: str, barrier: int) -> BarrierPoint | None:
        row = self._conn.execute(
            sa.select(barriers_t)
            .where(barriers_t.c.table_name == table)
            .where(barriers_t.c.barrier == barrier)
        ).first()
        return _point(row._mapping) if row else None


def _point(m: Any) -> BarrierPoint:
    return BarrierPoint(m["barrier"], m["snapshot_id"], m["completed_at_ms"])


def _record(m: Any) -> BarrierRecord:
    return BarrierRecord(
        table=m["table_name"],
        barrier=m["barrier"],
        snapshot_id=m["snapshot_id"],
        completed_at_ms=m["completed_at_ms"],
        job_id=m["job_id"],
    )


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
