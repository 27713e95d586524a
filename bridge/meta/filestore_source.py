"""Completed barriers read straight from FileStore snapshots.

Every snapshot carries the barrier it completed, so the FileStore alone can answer
"which barriers did this table complete, and as which snapshot": the
``dts meta rebuild`` input and the MetaService-less consistent read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from bridge.meta.consistency import BarrierPoint
from bridge.meta.versions import normalize_table_name
from filestore import Catalog
from filestore.format.snapshot import Snapshot, barrier_snapshots


def snapshot_barriers(snapshots: Iterable[Any]) -> dict[int, BarrierPoint]:
    """barrier -> the snapshot its committer wrote for it (one definition, in the
    FileStore: ``filestore.format.snapshot.barrier_snapshots``), so a rebuild gives the same
    answers as the live reports."""
    return {
        b: BarrierPoint(b, s.id, s.time_millis) for b, s in barrier_snapshots(snapshots).items()
    }


def table_names(catalog: Catalog) -> list[str]:
    """Every table of the catalog as ``db.table``."""
    names: set[str] = set()
    for db in catalog.list_databases():
        for item in catalog.list_tables(db):
            name = item if isinstance(item, str) else item.name
            names.add(name if "." in name else f"{db}.{name}")
    return sorted(names)


class FileStoreBarriers:
    """A :class:`~bridge.meta.consistency.BarrierSource` over a ``filestore.Catalog``.

    Each table's snapshots are read newest first, once per instance and only as far as
    the questions asked need (a table keeps an hour of snapshots by default: a strong
    read at a recent barrier reads the snapshots since, not the hour), so one answer
    sees one state. Barrier ids strictly increase per table (the commit refuses an
    older one), which is what lets a walk stop below the barrier it looks for.
    """

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._walks: dict[str, BarrierWalk] = {}

    def _walk(self, table: str) -> BarrierWalk:
        name = normalize_table_name(table)
        if name not in self._walks:
            snapshots = self.catalog.get_table(name).snapshot_manager.iter_backwards()
            self._walks[name] = BarrierWalk(snapshots)
        return self._walks[name]

    def latest(self, table: str) -> BarrierPoint | None:
        walk = self._walk(table)
        newest = walk.newest()
        return walk.point(newest) if newest is not None else None

    def greatest_common(self, tables: Sequence[str]) -> int | None:
        walks = [self._walk(t) for t in tables]
        newest = [w.newest() for w in walks]
        if not walks or any(b is None for b in newest):
            return None
        # candidates: the barriers of the table that is furthest behind, newest first
        lead = walks[newest.index(min(b for b in newest if b is not None))]
        for b in lead.barriers():
            if all(w.point(b) is not None for w in walks):
                return b
        return None

    def at(self, table: str, barrier: int) -> BarrierPoint | None:
        return self._walk(table).point(barrier)


class BarrierWalk:
    """One table's completed barriers, read from its snapshots newest first on demand.

    A barrier's point is the snapshot ``barrier_snapshots`` names among those carrying
    it, so it is settled once the walk has passed below every snapshot of that barrier.
    """

    def __init__(self, snapshots: Iterator[Snapshot]) -> None:
        self._snapshots = snapshots
        self._carrying: dict[int, list[Snapshot]] = {}  # barrier -> its snapshots
        self._order: list[int] = []  # barriers seen, newest first

    def _step(self) -> bool:
        """Read one more snapshot; False when there is none."""
        snap = next(self._snapshots, None)
        if snap is None:
            return False
        if snap.barrier is not None:
            if snap.barrier not in self._carrying:
                self._order.append(snap.barrier)
            self._carrying.setdefault(snap.barrier, []).append(snap)
        return True

    def newest(self) -> int | None:
        return next(self.barriers(), None)

    def barriers(self) -> Iterator[int]:
        """Every barrier, newest first, read as the caller goes on."""
        i = 0
        while i < len(self._order) or self._step():
            if i < len(self._order):
                yield self._order[i]
                i += 1

    def point(self, barrier: int) -> BarrierPoint | None:
        # every snapshot of ``barrier`` is read once one of an older barrier is
        while (not self._order or self._order[-1] >= barrier) and self._step():
            pass
        return snapshot_barriers(self._carrying.get(barrier, [])).get(barrier)
