"""Jobs and their table slots: registration (no cycle, one writer and one flusher per
table), heartbeats, ends and the lineage edges they make."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from bridge.meta import graph
from bridge.meta.db import (
    REPORT_CHUNK,
    chunks,
    flushers_t,
    job_tables_t,
    jobs_t,
    meta_lock,
    writers_t,
)
from bridge.meta.errors import (
    CycleError,
    InvalidRequest,
    JobAlreadyExists,
    JobNotFound,
    JobNotRunning,
    WriterConflict,
)
from bridge.meta.models import Job, JobKind, JobSpec, JobState, LineageEdge, SinkRole

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


class JobRegistry:
    """Every method is one database transaction (or runs inside the caller's)."""

    def __init__(
        self, write: Engine, read: Engine, clock: Callable[[], int], heartbeat_timeout_ms: int
    ) -> None:
        self._write, self._read, self._clock = write, read, clock
        self.heartbeat_timeout_ms = heartbeat_timeout_ms

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
            self.sweep_in(conn, now)
            yield conn, now

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
            existing = self.job(conn, job_id)
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
                self.touch(conn, job_id, now)  # a restarted process re-attaches
                return self.job_or_raise(conn, job_id)
            self._check_slots(conn, job_id, spec.role, sinks, now)
            # a flusher only moves its sinks' own logs into the FileStore: its sources (if it
            # names any) are kept on the job but make no lineage edges (see _edges)
            new_edges = (
                [] if spec.role is SinkRole.FLUSHER else [(s, t) for s in sources for t in sinks]
            )
            existing_edges = [(e.source, e.sink) for e in lineage_edges(conn) if e.job_id != job_id]
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
            return self.job_or_raise(conn, job_id)

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
            return self.job_or_raise(conn, job_id)

    def list_jobs(self, state: JobState | None = None) -> list[Job]:
        self.sweep()
        with self._read.begin() as conn:
            q = sa.select(jobs_t.c.job_id).order_by(jobs_t.c.registered_at_ms, jobs_t.c.job_id)
            if state is not None:
                q = q.where(jobs_t.c.state == state.value)
            ids = list(conn.execute(q).scalars())
            return self.jobs(conn, ids)

    def heartbeat(self, job_id: str) -> Job:
        """Record that the job is alive; refused once it was marked failed/finished."""
        with self._write.begin() as conn:
            now = self._clock()
            self.sweep_in(conn, now)
            job = self.job_or_raise(conn, job_id)
            if job.state is not JobState.RUNNING:
                raise JobNotRunning(
                    f"job {job_id} is {job.state.value}"
                    + (f" ({job.reason})" if job.reason else "")
                    + "; register it again to resume",
                    job_id=job_id,
                    state=job.state.value,
                )
            self.touch(conn, job_id, now)
            return self.job_or_raise(conn, job_id)

    def end_job(self, job_id: str, state: JobState, reason: str = "") -> Job:
        """Mark the job finished/failed/cancelled; frees its tables (its lineage stays)."""
        if state is JobState.RUNNING:
            raise InvalidRequest("a job ends as finished, failed or cancelled, not running")
        with self._registration() as (conn, now):
            job = self.job_or_raise(conn, job_id)
            if job.state is not JobState.RUNNING:
                if job.state is state:
                    return job  # idempotent
                raise JobNotRunning(
                    f"job {job_id} already ended as {job.state.value}",
                    job_id=job_id,
                    state=job.state.value,
                )
            self._end(conn, [job_id], state, reason, now)
            return self.job_or_raise(conn, job_id)

    def forget_job(self, job_id: str) -> None:
        """Delete an ended job and its lineage edges (an escape hatch for mistakes)."""
        with self._registration() as (conn, _now):
            job = self.job_or_raise(conn, job_id)
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
            return self.sweep_in(conn, self._clock())

    def sweep_in(self, conn: Connection, now: int) -> list[str]:
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

    def touch(self, conn: Connection, job_id: str, now: int) -> None:
        conn.execute(jobs_t.update().where(jobs_t.c.job_id == job_id).values(heartbeat_at_ms=now))

    def job(self, conn: Connection, job_id: str) -> Job | None:
        found = self.jobs(conn, [job_id])
        return found[0] if found else None

    def job_or_raise(self, conn: Connection, job_id: str) -> Job:
        job = self.job(conn, job_id)
        if job is None:
            raise JobNotFound(f"no job {job_id!r} is registered", job_id=job_id)
        return job

    def jobs(self, conn: Connection, ids: Sequence[str]) -> list[Job]:
        if not ids:
            return []
        tables: dict[str, dict[str, list[str]]] = {i: {"source": [], "sink": []} for i in ids}
        for chunk in chunks(list(ids), REPORT_CHUNK):
            for job_id, name, role in conn.execute(
                sa.select(job_tables_t.c.job_id, job_tables_t.c.table_name, job_tables_t.c.role)
                .where(job_tables_t.c.job_id.in_(chunk))
                .order_by(job_tables_t.c.table_name)
            ):
                tables[job_id][role].append(name)
        rows = {}
        for chunk in chunks(list(ids), REPORT_CHUNK):
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


def lineage_edges(conn: Connection) -> list[LineageEdge]:
    """source -> sink edges of every job that is not a flusher (flushers add no lineage)."""
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
