"""Opening tables and resolving time travel, shared by the reader, the sink and CTAS."""

from __future__ import annotations

from bridge.spark.options import ReadOptions
from filestore import Catalog, Table
from filestore.format.manifest import ManifestStore
from filestore.io.file_cache import FileCache

# Spark runs a sink's commit (a batch write's, a streaming micro-batch's) in a Python
# worker it reuses from one commit to the next, on a freshly unpickled writer, and a
# log-tier stream's tasks (which look up the old rows of the keys they normalize) in
# reused workers too: a handle opened each time would read every file a lookup touches
# again, a cost that grows with the table. Data files never change once written (unique
# names), so their decoded copies are kept for the worker's life, one cache per table
# directory, each within its table's lookup.cache-max-memory-size; so are the parsed
# manifests (immutable too) that name the live files.
_LOOKUP_CACHES: dict[str, tuple[FileCache, ManifestStore]] = {}


def open_catalog(warehouse: str) -> Catalog:
    return Catalog(warehouse)


def open_table(warehouse: str, name: str) -> Table:
    return open_catalog(warehouse).get_table(name)


def open_table_for_lookups(warehouse: str, name: str) -> Table:
    """A handle whose lookups share the files earlier lookups of the table decoded in this
    process (a sink's commits, a log-tier stream's normalizing tasks)."""
    table = open_table(warehouse, name)
    shared = (FileCache(), table.manifest_store)
    table.file_cache, table.manifest_store = _LOOKUP_CACHES.setdefault(table.paths.root, shared)
    return table


def resolve_snapshot_id(table: Table, opts: ReadOptions) -> int | None:
    """The snapshot a batch read sees: pinned once on the driver so every task reads the same one.

    None means the table has no snapshot yet (an empty read).
    """
    snap = table.resolve_snapshot(
        opts.snapshot_id, barrier=opts.barrier, timestamp=opts.timestamp, tag=opts.tag
    )
    return None if snap is None else int(snap.id)
