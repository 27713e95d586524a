"""The JSON of an Iceberg table metadata file (``v<N>.metadata.json``) and of its
snapshot entries, as ``filestore.iceberg.sync`` writes them for a dts table."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from filestore.format.schema import TableSchema
from filestore.format.snapshot import Snapshot
from filestore.iceberg.schema import FieldIds
from filestore.state.context import TableContext


def table_metadata(
    ctx: TableContext,
    latest: TableSchema,
    ids: FieldIds,
    spec: dict[str, Any],
    schemas: list[dict[str, Any]],
    mapping: str,
    entries: Sequence[dict[str, Any]],
    main: int | None,
    tags: Sequence[tuple[str, Snapshot]],
) -> dict[str, Any]:
    current = entries[-1] if entries else None
    refs: dict[str, Any] = {}
    if main is not None:
        refs["main"] = {"snapshot-id": main, "type": "branch"}
    for name, snap in tags:
        refs[name] = {"snapshot-id": snap.id, "type": "tag"}
    root = ctx.paths.root
    return {
        "format-version": 2,
        "table-uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, root)),
        "location": root,
        "last-sequence-number": current["sequence-number"] if current else 0,
        "last-updated-ms": current["timestamp-ms"] if current else int(time.time() * 1000),
        "last-column-id": ids.last_id,
        "current-schema-id": latest.id,
        "schemas": schemas,
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": spec["partition-spec"]}],
        "last-partition-id": 999 + len(spec["partition-spec"]),
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": {
            "schema.name-mapping.default": mapping,
            "dts.table": ctx.name,
        },
        "current-snapshot-id": main if main is not None else -1,
        "refs": refs,
        # filled by encode_metadata, each snapshot's part encoded once
        "snapshots": None,
        "snapshot-log": None,
        "metadata-log": [],
    }


def snapshot_entry(snap: Snapshot, parent_id: int | None, listed: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "snapshot-id": snap.id,
        "sequence-number": snap.id,
        "timestamp-ms": snap.time_millis,
        "manifest-list": listed,
        "summary": {
            "operation": "overwrite",
            "dts.commit-kind": snap.commit_kind,
            **({"dts.barrier": str(snap.barrier)} if snap.barrier is not None else {}),
        },
        "schema-id": snap.schema_id,
    }
    if parent_id is not None:
        out["parent-snapshot-id"] = parent_id
    return out
