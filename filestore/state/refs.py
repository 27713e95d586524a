"""Which files snapshots and tags reference: what expiration, tag deletion, rollback and
orphan cleanup must keep."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from filestore.format.manifest import ManifestEntry
from filestore.format.snapshot import Snapshot
from filestore.state.context import TableContext
from filestore.state.tags import list_tags


@dataclass(frozen=True)
class FileRefs:
    """Files one or more snapshots reference."""

    data: frozenset[str]
    manifests: frozenset[str]


def snapshot_manifests(ctx: TableContext, snap: Snapshot) -> set[str]:
    """Manifest lists and manifests a snapshot references."""
    store = ctx.manifest_store
    names: set[str] = set()
    for lst in (snap.base_manifest_list, snap.delta_manifest_list, snap.changelog_manifest_list):
        if lst:
            names.add(lst)
            names.update(m.file_name for m in store.read_list(lst))
    return names


def snapshot_refs(ctx: TableContext, snap: Snapshot) -> FileRefs:
    """Live data files, changelog files and manifests of one snapshot."""
    data = {e.file.file_name for e in ctx.live_entries(snap)}
    if snap.changelog_manifest_list:
        data.update(
            e.file.file_name
            for e in ctx.manifest_store.read_entries([snap.changelog_manifest_list])
        )
    return FileRefs(frozenset(data), frozenset(snapshot_manifests(ctx, snap)))


def tag_refs(ctx: TableContext, exclude: str | None = None) -> FileRefs:
    """Files the tagged snapshots reference (but the tag ``exclude``)."""
    data: set[str] = set()
    manifests: set[str] = set()
    for name, snap in list_tags(ctx):
        if name == exclude:
            continue
        refs = snapshot_refs(ctx, snap)
        data |= refs.data
        manifests |= refs.manifests
    return FileRefs(frozenset(data), frozenset(manifests))


def referenced_files(ctx: TableContext) -> FileRefs:
    """Every file any existing snapshot or tag mentions (added or deleted, data or changelog)."""
    data: set[str] = set()
    manifests: set[str] = set()
    tags = [s for _, s in list_tags(ctx)]
    snaps: list[Snapshot] = [*ctx.snapshot_manager.iter_backwards(), *tags]
    tagged = {s.id for s in tags}
    seen_lists: set[str] = set()
    for snap in snaps:
        try:
            _add_snapshot(ctx, snap, seen_lists, manifests, data)
        except FileNotFoundError:
            # expired while this walk ran (a writer expires after its commits): what only
            # it named went with it; a snapshot still there with a file missing is damage,
            # unless an expiration already moved EARLIEST past it (it deletes files next)
            below = ctx.snapshot_manager.expiring_below()
            expiring = below is not None and snap.id < below
            if snap.id in tagged or (ctx.snapshot_manager.exists(snap.id) and not expiring):
                raise
    return FileRefs(frozenset(data), frozenset(manifests))


def _add_snapshot(
    ctx: TableContext, snap: Snapshot, seen_lists: set[str], manifests: set[str], data: set[str]
) -> None:
    for lst in (snap.base_manifest_list, snap.delta_manifest_list, snap.changelog_manifest_list):
        if not lst or lst in seen_lists:
            continue
        seen_lists.add(lst)
        manifests.add(lst)
        for meta in ctx.manifest_store.read_list(lst):
            if meta.file_name in manifests:
                continue
            manifests.add(meta.file_name)
            for e in ctx.manifest_store.read_manifest(meta.file_name):
                data.add(e.file.file_name)


def delete_entry_files(ctx: TableContext, entries: Iterable[ManifestEntry]) -> int:
    """Delete the data or changelog files the entries name; how many were asked for."""
    keys = ctx.schema.partition_keys
    count = 0
    for e in entries:
        ctx.io.delete_file(ctx.paths.data_file(keys, e.partition, e.bucket, e.file.file_name))
        count += 1
    return count
