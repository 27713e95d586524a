"""Completed barriers read straight from FileStore snapshots.

Every snapshot carries the barrier it completed, so the FileStore alone can answer
"which barriers did this table complete, and as which snapshot": the
``dts meta rebuild`` input and the MetaService-less consistent read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from bridge.meta.consistency import BarrierPoint
from bridge.meta.versions import normalize_table_name
from filestore import Catalog
from filestore.snapshot import barrier_snapshots


def snapshot_barriers(snapshots: Iterable[Any]) -> dict[int, BarrierPoint]:
    """barrier -> the snapshot its committer wrote for it (one definition, in the
    FileStore: ``filestore.snapshot.barrier_snapshots``), so a rebuild gives the same
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

    Snapshots are read once per table per instance, so one answer sees one state.
    """

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._cache: dict[str, dict[int, BarrierPoint]] = {}

    def points(self, table: str) -> dict[int, BarrierPoint]:
        name = normalize_table_name(table)
        if name not in self._cache:
            self._cache[name] = snapshot_barriers(self.catalog.get_table(name).snapshots())
        return self._cache[name]

    def latest(self, table: str) -> BarrierPoint | None:
        points = self.points(table)
        return points[max(points)] if points else None

    def greatest_common(self, tables: Sequence[str]) -> int | None:
        common: set[int] | None = None
        for t in tables:
            ids = set(self.points(t))
            common = ids if common is None else common & ids
        return max(common) if common else None

    def at(self, table: str, barrier: int) -> BarrierPoint | None:
        return self.points(table).get(barrier)
