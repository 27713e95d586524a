"""Rollback: make an older snapshot (or a tag) the table's latest state again.

Snapshots after the target are removed, with the data, changelog and manifest
files only they added. Not safe against concurrent writers: stop them first
(a writer that commits meanwhile may see its commit rolled back, or lose the race).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from filestore.errors import SnapshotNotFound
from filestore.manifest import ADD
from filestore.snapshot import Snapshot

if TYPE_CHECKING:
    from filestore.table import Table


@dataclass
class RollbackResult:
    snapshot: Snapshot
    removed_snapshots: list[int] = field(default_factory=list)
    deleted_files: int = 0


def rollback_to(
    table: Table, snapshot_id: int | None = None, *, tag: str | None = None
) -> RollbackResult:
    """Roll the table back to snapshot_id or to the snapshot a tag holds."""
    from filestore.expire import snapshot_manifests, snapshot_refs, tag_refs

    if (snapshot_id is None) == (tag is None):
        raise ValueError("give exactly one of snapshot_id or tag")
    manager = table.snapshot_manager
    target = table.tag_snapshot(tag) if tag is not None else manager.get(int(snapshot_id or 0))
    latest_id = manager.latest_id()
    if latest_id is None:
        raise SnapshotNotFound(f"table {table.name} has no snapshots")
    earliest_id = manager.earliest_id() or target.id
    keep = snapshot_refs(table, target)
    tags = tag_refs(table)
    keep_data = set(keep.data) | tags.data
    keep_manifests = set(keep.manifests) | tags.manifests
    # a tag may name an id that a rollback freed and later commits reused: then the
    # snapshot on disk under that id is another one, and is replaced by the tag's
    replace = not manager.exists(target.id) or manager.get(target.id) != target
    later = [
        s for s in manager.iter_backwards() if s.id > target.id or (replace and s.id == target.id)
    ]
    if replace and manager.exists(target.id - 1):
        keep_manifests |= snapshot_manifests(table, manager.get(target.id - 1))
    store = table.manifest_store
    keys = table.schema.partition_keys
    deleted = 0
    entries = []
    for snap in later:
        entries += store.read_entries([snap.delta_manifest_list, snap.changelog_manifest_list])
    if later and target.id < earliest_id:
        # files live at the earliest snapshot were added after the target, in expired snapshots
        first = later[-1]
        entries += store.read_entries([first.base_manifest_list])
    for e in entries:
        if e.kind == ADD and e.file.file_name not in keep_data:
            table.io.delete_file(
                table.paths.data_file(keys, e.partition, e.bucket, e.file.file_name)
            )
            deleted += 1
    doomed_manifests: set[str] = set()
    for snap in later:
        doomed_manifests |= snapshot_manifests(table, snap)
    # newest first, so LATEST (which walks forward) never lands on a removed id
    for snap in later:
        table.io.delete_file(table.paths.snapshot(snap.id))
    if replace:
        # the tag's snapshot comes back under its id (the only one if it predates them all)
        table.io.write_bytes(table.paths.snapshot(target.id), target.to_bytes())
    table.io.write_bytes(table.paths.latest_hint, str(target.id).encode())
    if target.id < earliest_id:
        table.io.write_bytes(table.paths.earliest_hint, str(target.id).encode())
    for m in doomed_manifests - keep_manifests:
        table.io.delete_file(table.paths.manifest(m))
    return RollbackResult(target, [s.id for s in later], deleted)
