"""``dts meta rebuild``: reload every table's completed barriers from the FileStore.

Losing the service database loses no barrier progress: each snapshot names its
barrier. (Lineage is not in the FileStore; jobs register it again when they start.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from bridge.meta.filestore_source import snapshot_barriers, table_names
from bridge.meta.models import RebuildResult, TableBarrierReport, normalize_table_name
from filestore import Catalog


class BarrierSink(Protocol):
    def report_barriers(self, reports: Sequence[TableBarrierReport]) -> int: ...


def rebuild(
    target: BarrierSink,
    catalog: Catalog,
    tables: Sequence[str] | None = None,
    *,
    replace: bool = False,
    progress: Callable[[str, int], None] | None = None,
) -> RebuildResult:
    """Report every completed barrier of ``tables`` (default: all) to ``target`` (a
    :class:`~bridge.meta.store.Store` or a :class:`~bridge.meta.client.MetaClient`).

    ``replace`` first clears what the store holds for each table (Store targets only),
    so records of snapshots that were since expired disappear too.
    """
    names = [normalize_table_name(t) for t in tables] if tables else table_names(catalog)
    total = 0
    rebuilt = 0
    skipped: list[str] = []
    for name in names:
        points = snapshot_barriers(catalog.get_table(name).snapshots())
        if not points:
            skipped.append(name)
            continue
        if replace:
            clear = getattr(target, "clear_barriers", None)
            if clear is None:
                raise TypeError("replace=True needs direct database access (a Store)")
            clear(name)
        reports = [
            TableBarrierReport(
                table=name,
                barrier=p.barrier,
                snapshot_id=p.snapshot_id,
                completed_at_ms=p.completed_at_ms,
                job_id=None,
            )
            for p in points.values()
        ]
        total += target.report_barriers(reports)
        rebuilt += 1
        if progress is not None:
            progress(name, len(reports))
    return RebuildResult(tables=rebuilt, barriers=total, skipped_tables=skipped)
