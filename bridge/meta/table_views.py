"""Read-only views over jobs, lineage and barriers: table statuses, the lineage graph,
consistent versions, lag traces and what ``/metrics`` reports."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from bridge.meta import graph
from bridge.meta.barrier_store import DbBarriers, known_tables, require_tables
from bridge.meta.consistency import BarrierPoint, consistent_version
from bridge.meta.db import barriers_t, flushers_t, job_tables_t, jobs_t, writers_t
from bridge.meta.errors import InvalidRequest
from bridge.meta.job_store import JobRegistry, lineage_edges
from bridge.meta.lag_trace import trace_lag
from bridge.meta.models import (
    ConsistencyMode,
    ConsistentVersion,
    Job,
    JobState,
    Lineage,
    LineageEdge,
    SinkRole,
    TableStatus,
    Trace,
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


class TableViews:
    def __init__(self, read: Engine, clock: Callable[[], int], jobs: JobRegistry) -> None:
        self._read, self._clock, self._jobs = read, clock, jobs

    def tables(self) -> list[TableStatus]:
        with self._read.begin() as conn:
            return self._statuses(conn, None)

    def table(self, name: str) -> TableStatus:
        with self._read.begin() as conn:
            require_tables(conn, [name])
            return self._statuses(conn, [name])[0]

    def _statuses(self, conn: Connection, only: list[str] | None) -> list[TableStatus]:
        edges = lineage_edges(conn)
        names = only if only is not None else sorted(known_tables(conn))
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
            return lineage_edges(conn)

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
            edges = lineage_edges(conn)
            depth = graph.depths(edges)
            source = DbBarriers(conn)
            groups = []
            for members in graph.components(edges, latest):
                common: int | None = None
                if all(t in latest for t in members):
                    common = (
                        latest[members[0]] if len(members) == 1 else source.greatest_common(members)
                    )
                groups.append(TableGroup(graph.group_name(members, depth), tuple(members), common))
        return MetricsView(now, counts, running, latest, depth, groups)

    def consistent_points(self) -> dict[str, BarrierPoint | None]:
        """Per known table, the oldest point a strong read of it may pin: its completion
        of the greatest barrier it shares with every table of its barrier domain (None:
        no strong read across tables can include it). A domain is the tables of one
        lineage group that share barriers, as everything derived from one source does
        (a table joined in from another source has barriers of its own); any strong
        read's barrier is at or after its domain's."""
        with self._read.begin() as conn:
            known = known_tables(conn)
            source = DbBarriers(conn)
            out: dict[str, BarrierPoint | None] = dict.fromkeys(sorted(known))
            for members in graph.components(lineage_edges(conn), known):
                for domain in _barrier_domains(members, source):
                    common = source.greatest_common(domain) if len(domain) > 1 else None
                    if common is None:
                        continue
                    for table in domain:
                        out[table] = source.at(table, common)
        return out

    def consistent_version(
        self, tables: Sequence[str], mode: ConsistencyMode = ConsistencyMode.STRONG
    ) -> ConsistentVersion:
        listed = list(dict.fromkeys(tables))
        if not listed:
            raise InvalidRequest("give at least one table")
        with self._read.begin() as conn:
            require_tables(conn, listed)
            between: list[str] = []
            if mode is ConsistencyMode.STRONG and len(listed) > 1:
                between = sorted(graph.between(lineage_edges(conn), listed))
            return consistent_version(DbBarriers(conn), listed, mode, between=between)

    def lineage(self, table: str) -> Lineage:
        with self._read.begin() as conn:
            require_tables(conn, [table])
            edges = lineage_edges(conn)
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
            require_tables(conn, [table])
            edges = lineage_edges(conn)
            related = graph.upstream(edges, table) | {table}
            source = DbBarriers(conn)
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
        jobs = {j.job_id: j for j in self._jobs.jobs(conn, sorted(set(chosen.values())))}
        return {name: jobs[j] for name, j in chosen.items() if j in jobs}


def _barrier_domains(members: Sequence[str], source: DbBarriers) -> list[list[str]]:
    """``members`` split into the sets that share barriers (pairs that have one in
    common, joined transitively), each sorted."""
    domain = {t: t for t in members}

    def root(t: str) -> str:
        while domain[t] != t:
            t = domain[t]
        return t

    for i, a in enumerate(members):
        for b in members[i + 1 :]:
            if root(a) != root(b) and source.greatest_common([a, b]) is not None:
                domain[root(b)] = root(a)
    split: dict[str, list[str]] = {}
    for t in members:
        split.setdefault(root(t), []).append(t)
    return [sorted(d) for d in split.values()]
