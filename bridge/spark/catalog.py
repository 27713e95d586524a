"""Opening tables and resolving time travel, shared by the reader, the sink and CTAS."""

from __future__ import annotations

from bridge.spark.options import ReadOptions
from filestore import Catalog, Table


def open_catalog(warehouse: str) -> Catalog:
    return Catalog(warehouse)


def open_table(warehouse: str, name: str) -> Table:
    return open_catalog(warehouse).get_table(name)


def resolve_snapshot_id(table: Table, opts: ReadOptions) -> int | None:
    """The snapshot a batch read sees: pinned once on the driver so every task reads the same one.

    None means the table has no snapshot yet (an empty read).
    """
    snap = table.resolve_snapshot(
        opts.snapshot_id, barrier=opts.barrier, timestamp=opts.timestamp, tag=opts.tag
    )
    return None if snap is None else int(snap.id)
