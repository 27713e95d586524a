"""Rollback: make an older snapshot (or a tag) the table's latest state again.

Snapshots after the target are removed, with the data, changelog and manifest
files only they added. Not safe against concurrent writers: stop them first
(a writer that commits meanwhile may see its commit rolled back, or lose the race).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from filestore.errors import SnapshotNotFound
from filestore.format.manifest import ADD
from filestore.format.snapshot import Snapshot
from filestore.state.context import TableContext
from filestore.state.refs import delete_entry_files, snapshot_manifests, snapshot_refs, tag_refs
from filestore.state.tags import tag_snapshot


@dataclass
class RollbackResult:
    snapshot: Snapshot
    removed_snapshots: list[int] = field(default_factory=list)
    deleted_files: int = 0


def rollback_to(
    ctx: TableContext, snapshot_id: int | None = None, *, tag: str | None = None
) -> RollbackResult:
    """Roll the table back to snapshot_id or to the snapshot a tag holds."""
    if (snapshot_id is None) == (tag is None):
        raise ValueError("give exactly one of snapshot_id or tag")
    manager = ctx.snapshot_manager
    target = tag_snapshot(ctx, tag) if tag is not None else manager.get(int(snapshot_id or 0))
    latest_id = manager.latest_id()
    if latest_id is None:
        raise SnapshotNotFound(f"table {ctx.name} has no snapshots")
    earliest_id = manager.earliest_id() or target.id
    keep = snapshot_refs(ctx, target)
    tags = tag_refs(ctx)
    keep_data = set(keep.data) | tags.data
    keep_manifests = set(keep.manifests) | tags.manifests
    # a tag may name an id that a rollback freed and later commits reused: then the
    # snapshot on disk under that id is another one, and is replaced by the tag's
    replace = not manager.exists(target.id) or manager.get(target.id) != target
    later = [
        s for s in manager.iter_backwards() if s.id > target.id or (replace and s.id == target.id)
    ]
    if replace and manager.exists(target.id - 1):
        keep_manifests |= snapshot_manifests(ctx, manager.get(target.id - 1))
    store = ctx.manifest_store
    entries = []
    for snap in later:
        entries += store.read_entries([snap.delta_manifest_list, snap.changelog_manifest_list])
    if later and target.id < earliest_id:
        # files live at the earliest snapshot were added after the target, in expired snapshots
        first = later[-1]
        entries += store.read_entries([first.base_manifest_list])
    deleted = delete_entry_files(
        ctx, (e for e in entries if e.kind == ADD and e.file.file_name not in keep_data)
    )
    doomed_manifests: set[str] = set()
    for snap in later:
        doomed_manifests |= snapshot_manifests(ctx, snap)
    # newest first, so LATEST (which walks forward) never lands on a removed id
    for snap in later:
        ctx.io.delete_file(ctx.paths.snapshot(snap.id))
    if replace:
        # the tag's snapshot comes back under its id (the only one if it predates them all)
        ctx.io.write_bytes(ctx.paths.snapshot(target.id), target.to_bytes())
    ctx.io.write_bytes(ctx.paths.latest_hint, str(target.id).encode())
    if target.id < earliest_id:
        ctx.io.write_bytes(ctx.paths.earliest_hint, str(target.id).encode())
    for m in doomed_manifests - keep_manifests:
        ctx.io.delete_file(ctx.paths.manifest(m))
    return RollbackResult(target, [s.id for s in later], deleted)
