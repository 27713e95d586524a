"""Tags: named snapshots that survive expiration (``tag/tag-<name>`` holds the snapshot JSON).

This module only stores and reads tags; deleting a tag together with the files
only it kept alive is file cleanup (``filestore.maintenance.expire.delete_tag``), which
reads tags through here.
"""

from __future__ import annotations

import json

from filestore.errors import InvalidIdentifier, SnapshotNotFound, TagError
from filestore.format.identifiers import check_identifier
from filestore.format.snapshot import Snapshot
from filestore.state.context import TableContext


def _check_name(name: str) -> None:
    try:
        check_identifier("tag", name)
    except InvalidIdentifier as e:
        raise TagError(str(e)) from None


def create_tag(ctx: TableContext, name: str, snapshot_id: int | None = None) -> Snapshot:
    """Tag a snapshot (the latest by default); TagError if the tag exists."""
    _check_name(name)
    manager = ctx.snapshot_manager
    snap = manager.latest() if snapshot_id is None else manager.get(snapshot_id)
    if snap is None:
        raise SnapshotNotFound(f"table {ctx.name} has no snapshot to tag")
    if not ctx.io.create_if_absent(ctx.paths.tag(name), snap.to_bytes()):
        raise TagError(f"table {ctx.name} already has a tag {name!r}; delete it first")
    return snap


def tag_snapshot(ctx: TableContext, name: str) -> Snapshot:
    """The snapshot a tag points at."""
    data = ctx.io.try_read_bytes(ctx.paths.tag(name))
    if data is None:
        raise SnapshotNotFound(f"table {ctx.name} has no tag {name!r}")
    return Snapshot.from_json(json.loads(data))


def list_tags(ctx: TableContext) -> list[tuple[str, Snapshot]]:
    """(name, snapshot) of every tag, ordered by snapshot id then name."""
    out = []
    for info in ctx.io.list_dir(ctx.paths.tag_dir):
        base = info.base_name
        if not base.startswith("tag-"):
            continue
        data = ctx.io.try_read_bytes(info.path)
        if data is None:
            continue
        out.append((base[4:], Snapshot.from_json(json.loads(data))))
    return sorted(out, key=lambda t: (t[1].id, t[0]))
