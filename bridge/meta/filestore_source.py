"""Completed barriers read straight from FileStore snapshots.

Every snapshot carries the barrier it completed, so the FileStore alone can answer
"which barriers did this table complete, and as which snapshot": the
``dts meta rebuild`` input and the MetaService-less consistent read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from bridge.meta.consistency import BarrierPoint
from bridge.meta.models import normalize_table_name

COMPACT = "COMPACT"


def snapshot_barriers(snapshots: Iterable[Any]) -> dict[int, BarrierPoint]:
    """barrier -> the snapshot its committer wrote for it.

    A compaction may later carry the same barrier; it holds the same data, but the
    committer's snapshot (the first non-COMPACT one) is what the live service was told,
    so a rebuild gives the same answers.
    """
    points: dict[int, BarrierPoint] = {}
    compact_only: set[int] = set()
    for s in sorted(snapshots, key=lambda s: s.id):
        if s.barrier is None:
            continue
        is_compact = s.commit_kind == COMPACT
        if s.barrier not in points or (s.barrier in compact_only and not is_compact):
            points[s.barrier] = BarrierPoint(s.barrier, s.id, s.time_millis)
            if is_compact:
                compact_only.add(s.barrier)
            else:
                compact_only.discard(s.barrier)
    return points


def table_names(catalog: Any) -> list[str]:
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

    def __init__(self, catalog: Any) -> None:
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
