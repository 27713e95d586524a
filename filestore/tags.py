"""Tags: named snapshots that survive expiration (``tag/tag-<name>`` holds the snapshot JSON)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from filestore.errors import FileStoreError, SnapshotNotFound
from filestore.identifiers import InvalidIdentifier, check_identifier
from filestore.snapshot import Snapshot

if TYPE_CHECKING:
    from filestore.table import Table


class TagError(FileStoreError):
    """A tag cannot be created or deleted as asked."""


def _check_name(name: str) -> None:
    try:
        check_identifier("tag", name)
    except InvalidIdentifier as e:
        raise TagError(str(e)) from None


def create_tag(table: Table, name: str, snapshot_id: int | None = None) -> Snapshot:
    """Tag a snapshot (the latest by default); TagError if the tag exists."""
    _check_name(name)
    snap = table.latest_snapshot() if snapshot_id is None else table.snapshot(snapshot_id)
    if snap is None:
        raise SnapshotNotFound(f"table {table.name} has no snapshot to tag")
    if not table.io.create_if_absent(table.paths.tag(name), snap.to_bytes()):
        raise TagError(f"table {table.name} already has a tag {name!r}; delete it first")
    return snap


def list_tags(table: Table) -> list[tuple[str, Snapshot]]:
    """(name, snapshot) of every tag, ordered by snapshot id then name."""
    out = []
    for info in table.io.list_dir(table.paths.tag_dir):
        base = info.base_name
        if not base.startswith("tag-"):
            continue
        data = table.io.try_read_bytes(info.path)
        if data is None:
            continue
        out.append((base[4:], Snapshot.from_json(json.loads(data))))
    return sorted(out, key=lambda t: (t[1].id, t[0]))


def delete_tag(table: Table, name: str) -> Snapshot:
    """Remove a tag; files only it kept alive (its snapshot expired) are deleted too."""
    from filestore.expire import snapshot_refs, tag_refs

    snap = table.tag_snapshot(name)
    earliest_id = table.snapshot_manager.earliest_id()
    orphaned: set[str] = set()
    manifests: set[str] = set()
    if earliest_id is None or snap.id < earliest_id:
        # the tag was the last thing referencing its snapshot's files
        mine = snapshot_refs(table, snap)
        others = tag_refs(table, exclude=name)
        kept_data: set[str] = set(others.data)
        kept_manifests: set[str] = set(others.manifests)
        if earliest_id is not None:
            earliest = snapshot_refs(table, table.snapshot(earliest_id))
            kept_data |= earliest.data
            kept_manifests |= earliest.manifests
        orphaned = set(mine.data) - kept_data
        manifests = set(mine.manifests) - kept_manifests
    table.io.delete_file(table.paths.tag(name))
    if orphaned:
        keys = table.schema.partition_keys
        store = table.manifest_store
        entries = store.read_entries(
            [snap.base_manifest_list, snap.delta_manifest_list, snap.changelog_manifest_list]
        )
        for e in entries:
            if e.file.file_name in orphaned:
                table.io.delete_file(
                    table.paths.data_file(keys, e.partition, e.bucket, e.file.file_name)
                )
    for m in manifests:
        table.io.delete_file(table.paths.manifest(m))
    return snap
