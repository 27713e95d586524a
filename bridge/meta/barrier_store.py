"""Completed barriers per table: reports (only from the table's running writer or
flusher), listing and pruning, and the barrier source consistent reads use."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from bridge.meta.consistency import BarrierPoint
from bridge.meta.db import REPORT_CHUNK, barriers_t, chunks, flushers_t, job_tables_t, writers_t
from bridge.meta.errors import Forbidden, JobNotRunning, TableNotRegistered, WriterConflict
from bridge.meta.job_store import JobRegistry
from bridge.meta.models import BarrierRecord, JobState, TableBarrierReport


class BarrierLog:
    def __init__(
        self, write: Engine, read: Engine, clock: Callable[[], int], jobs: JobRegistry
    ) -> None:
        self._write, self._read, self._clock, self._jobs = write, read, clock, jobs

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
            self._jobs.sweep_in(conn, now)
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
            for chunk in chunks(list(merged.values()), REPORT_CHUNK):
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
            job = self._jobs.job_or_raise(conn, job_id)
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
            self._jobs.touch(conn, job_id, now)  # a committing job is alive

    def _upsert(self, rows: list[dict[str, Any]]) -> sa.Executable:
        # the upsert is dialect-specific: load only the dialect of the connected database
        # (Postgres is the optional backend)
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
            require_tables(conn, [table])
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


class DbBarriers:
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


def known_tables(conn: Connection) -> set[str]:
    a = set(conn.execute(sa.select(job_tables_t.c.table_name).distinct()).scalars())
    b = set(conn.execute(sa.select(barriers_t.c.table_name).distinct()).scalars())
    return a | b


def require_tables(conn: Connection, tables: Sequence[str]) -> None:
    missing = [t for t in tables if not _is_known(conn, t)]
    if missing:
        raise TableNotRegistered(
            f"unknown table(s) {', '.join(missing)}: no job registered them and no "
            "barrier was reported (run `dts meta rebuild` to load them from the FileStore)",
            tables=missing,
        )


def _is_known(conn: Connection, table: str) -> bool:
    for t, col in (
        (job_tables_t, job_tables_t.c.table_name),
        (barriers_t, barriers_t.c.table_name),
    ):
        if conn.execute(
            sa.select(sa.literal(1)).select_from(t).where(col == table).limit(1)
        ).first():
            return True
    return False
