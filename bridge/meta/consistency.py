"""Consistent versions across tables (FLIP-276).

Pure logic over a :class:`BarrierSource` (the MetaService's database, or the
FileStore snapshots directly), so both give the same answers. It imports no pydantic
(values from :mod:`bridge.meta.versions`): a consistent read without the MetaService
runs it on a Spark driver with `dynamic-table-storage[spark]` only. Where a lag starts
is :mod:`bridge.meta.lag_trace`.

Barrier ids are epoch milliseconds shared by every table derived from one
source barrier, so "how far behind" is a difference of barrier ids in ms.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from bridge.meta.errors import NoConsistentVersion
from bridge.meta.versions import ConsistencyMode, ConsistentVersion, TableVersion


@dataclass(frozen=True)
class BarrierPoint:
    """A completed barrier of one table and the snapshot holding exactly its data."""

    barrier: int
    snapshot_id: int | None
    completed_at_ms: int | None = None


class BarrierSource(Protocol):
    def latest(self, table: str) -> BarrierPoint | None:
        """The table's greatest completed barrier."""

    def greatest_common(self, tables: Sequence[str]) -> int | None:
        """The greatest barrier completed by every one of ``tables``."""

    def at(self, table: str, barrier: int) -> BarrierPoint | None:
        """The table's completion record of exactly ``barrier``."""


def consistent_version(
    source: BarrierSource,
    listed: Sequence[str],
    mode: ConsistencyMode,
    *,
    between: Sequence[str] = (),
) -> ConsistentVersion:
    """Strong: the greatest barrier completed by every listed table and every table
    ``between`` them; weak: each listed table's latest. Names who holds back and by how much.
    """
    tables = list(dict.fromkeys([*listed, *between]))
    latest = {t: source.latest(t) for t in tables}
    if mode is ConsistencyMode.WEAK:
        return _weak(listed, latest)
    missing = [t for t in tables if latest[t] is None]
    if missing:
        raise NoConsistentVersion(
            f"no completed barrier yet for {', '.join(missing)}: "
            "a strong read waits until every table (and every table between them) completed one",
            held_back_by=missing[0],
            tables=tables,
        )
    common = source.greatest_common(tables)
    present = {t: p for t, p in latest.items() if p is not None}
    if common is None:
        described = ", ".join(f"{t}={p.barrier}" for t, p in present.items())
        raise NoConsistentVersion(
            f"{', '.join(tables)} share no completed barrier (latest: {described}); "
            "tables derived from one source carry the same barrier ids, "
            "tables fed by unrelated sources never do",
            held_back_by=min(present, key=lambda t: present[t].barrier),
            tables=tables,
        )
    newest = max(p.barrier for p in present.values())
    holder = min(tables, key=lambda t: present[t].barrier)
    versions = []
    for t in tables:
        at = source.at(t, common)
        versions.append(
            TableVersion(
                table=t,
                listed=t in listed,
                barrier=common,
                snapshot_id=at.snapshot_id if at else None,
                latest_barrier=present[t].barrier,
                latest_snapshot_id=present[t].snapshot_id,
                behind_ms=present[t].barrier - common,
                lag_ms=newest - present[t].barrier,
            )
        )
    holdback = newest - common
    if holdback == 0:
        message = f"all tables at their latest barrier {common}"
    else:
        message = (
            f"read at barrier {common}: {holder} (latest {present[holder].barrier}) "
            f"holds the others back by {holdback} ms"
        )
    return ConsistentVersion(
        mode=ConsistencyMode.STRONG,
        barrier=common,
        tables=versions,
        held_back_by=holder if holdback else None,
        holdback_ms=holdback,
        message=message,
    )


def _weak(listed: Sequence[str], latest: Mapping[str, BarrierPoint | None]) -> ConsistentVersion:
    present = {t: latest[t] for t in listed if latest[t] is not None}
    newest = max((p.barrier for p in present.values() if p), default=None)
    versions = []
    for t in listed:
        p = latest[t]
        versions.append(
            TableVersion(
                table=t,
                listed=True,
                barrier=p.barrier if p else None,
                snapshot_id=p.snapshot_id if p else None,
                latest_barrier=p.barrier if p else None,
                latest_snapshot_id=p.snapshot_id if p else None,
                behind_ms=0 if p else None,
                lag_ms=(newest - p.barrier) if p and newest is not None else None,
            )
        )
    missing = [t for t in listed if latest[t] is None]
    if missing:
        return ConsistentVersion(
            mode=ConsistencyMode.WEAK,
            barrier=None,
            tables=versions,
            held_back_by=missing[0],
            holdback_ms=0,
            message=f"no completed barrier yet for {', '.join(missing)}",
        )
    assert newest is not None
    holder = min(listed, key=lambda t: present[t].barrier)  # type: ignore[union-attr]
    spread = newest - present[holder].barrier  # type: ignore[union-attr]
    return ConsistentVersion(
        mode=ConsistencyMode.WEAK,
        barrier=None,
        tables=versions,
        held_back_by=holder if spread else None,
        holdback_ms=spread,
        message=(
            f"each table at its latest barrier; {holder} is {spread} ms behind the newest"
            if spread
            else "each table at its latest barrier; all at the same barrier"
        ),
    )
