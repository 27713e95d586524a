"""Where the lag of a table starts (FLIP-276's late-data tracing): pure logic over the
lineage edges, each table's latest barrier and the jobs writing them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bridge.meta.graph import adjacency
from bridge.meta.models import Job, LineageEdge, Trace


def trace_lag(
    table: str,
    edges: Sequence[LineageEdge],
    latest: Mapping[str, int | None],
    writers: Mapping[str, Job],
    now_ms: int,
) -> Trace:
    """Walk upstream from ``table`` while the upstream table lags at least as much; where
    every upstream table is ahead (or there is none), the lag starts: at that table and
    the job writing it.
    """
    ups = adjacency(edges, reverse=True)

    def rank(t: str) -> int:
        b = latest.get(t)
        return -1 if b is None else b

    path = [table]
    current = table
    while True:
        parents = [u for u in ups.get(current, {}) if u not in path]
        lagging = [u for u in parents if rank(u) <= rank(current)]
        if not lagging:
            break
        current = min(lagging, key=lambda u: (rank(u), u))
        path.append(current)

    def lag_of(t: str) -> int | None:
        parents = list(ups.get(t, {}))
        own = latest.get(t)
        if own is None:
            return None
        if not parents:
            return max(0, now_ms - own)
        ahead = [b for u in parents if (b := latest.get(u)) is not None]
        return max(0, max(ahead) - own) if ahead else 0

    origin = current
    job = writers.get(origin)
    age = (now_ms - job.heartbeat_at_ms) if job else None
    origin_lag = lag_of(origin)
    return Trace(
        table=table,
        latest_barrier=latest.get(table),
        lag_ms=_lag_vs_upstream(table, ups, latest, now_ms),
        origin_table=origin,
        origin_lag_ms=origin_lag,
        origin_job_id=job.job_id if job else None,
        origin_job_state=job.state if job else None,
        origin_heartbeat_age_ms=age,
        path=path,
        explanation=_explain(table, origin, path, ups, latest, job, age, origin_lag),
    )


def _lag_vs_upstream(
    table: str,
    ups: Mapping[str, Mapping[str, list[str]]],
    latest: Mapping[str, int | None],
    now_ms: int,
) -> int | None:
    own = latest.get(table)
    if own is None:
        return None
    seen: set[str] = set()
    stack = [table]
    newest: int | None = None
    while stack:
        for u in ups.get(stack.pop(), {}):
            if u not in seen:
                seen.add(u)
                stack.append(u)
                b = latest.get(u)
                if b is not None and (newest is None or b > newest):
                    newest = b
    if not seen:
        return max(0, now_ms - own)
    return max(0, (newest if newest is not None else own) - own)


def _explain(
    table: str,
    origin: str,
    path: list[str],
    ups: Mapping[str, Mapping[str, list[str]]],
    latest: Mapping[str, int | None],
    job: Job | None,
    age: int | None,
    origin_lag: int | None,
) -> str:
    who = (
        f"job {job.job_id} ({job.state.value}, last heartbeat {age} ms ago)"
        if job
        else "no registered job"
    )
    b = latest.get(origin)
    done = f"completed barrier {b}" if b is not None else "completed no barrier"
    parents = sorted(ups.get(origin, {}))
    if parents:
        srcs = ", ".join(f"{u}={latest.get(u)}" for u in parents)
        where = f"{origin} {done} while its sources are ahead ({srcs}): the lag starts in {who} writing {origin}"
    else:
        where = f"{origin} is a source table that {done}, {origin_lag} ms ago: the lag starts at its writer, {who}"
    via = f" (via {' <- '.join(path)})" if len(path) > 1 else ""
    return f"{table}{via}: {where}"
