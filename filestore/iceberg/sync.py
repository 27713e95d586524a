"""Bring a table's Iceberg metadata (``<table>/metadata/``) up to its dts snapshots.

Run after every commit and every expiration of a table with
``metadata.iceberg.storage=table-location``. Each retained dts snapshot (and each
tagged one) is one Iceberg snapshot of the same id, written once: a manifest list
``snap-<id>-dts.avro`` naming one data manifest and one position-delete manifest.
Then a new ``v<N>.metadata.json`` lists the snapshots dts still has, the tags as
Iceberg tags, and ``version-hint.text`` says N (the file-system table convention
pyiceberg and DuckDB read). Nothing is copied: the manifests name dts's own files.

What a reader sees at a snapshot is what dts reads there: every live file, minus the
rows dts skips in it (deleted by a vector, retractions) as position deletes. A
primary-key table without deletion vectors shows a bucket only while its files hold
each key once (one sorted run: after a full compaction, or written once); a bucket
that needs a merge is left out, never shown with rows a merge would remove.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from filestore.context import TableContext
from filestore.errors import IcebergMetadataError
from filestore.iceberg.deletes import delete_file_name, skipped_rows, write_position_deletes
from filestore.iceberg.manifests import (
    DATA,
    POSITION_DELETES,
    FileEntry,
    Manifest,
    delete_paths,
    write_manifest,
    write_manifest_list,
)
from filestore.iceberg.schema import FieldIds, iceberg_schema, name_mapping
from filestore.manifest import ManifestEntry
from filestore.read import one_sorted_run
from filestore.schema import TableSchema
from filestore.snapshot import Snapshot
from filestore.tags import list_tags

log = logging.getLogger(__name__)

METADATA_DIR = "metadata"
#: metadata versions kept: a reader that opened one of them finds its files
KEEP_VERSIONS = 10
#: the sequence number of every data file: position deletes (at their snapshot's
#: sequence number, the dts snapshot id >= 1) then apply to it
DATA_SEQUENCE = 1

_AVRO_PARTITION_TYPES: dict[pa.DataType, Any] = {
    pa.bool_(): "boolean",
    pa.int8(): "int",
    pa.int16(): "int",
    pa.int32(): "int",
    pa.int64(): "long",
    pa.string(): "string",
    pa.large_string(): "string",
    pa.date32(): {"type": "int", "logicalType": "date"},
}


@dataclass
class SyncResult:
    version: int
    snapshots_written: list[int] = field(default_factory=list)
    files_left_out: int = 0  # of the newest snapshot: buckets that need a merge


class IcebergSync:
    def __init__(self, ctx: TableContext) -> None:
        self.ctx = ctx
        self.dir = f"{ctx.paths.root}/{METADATA_DIR}"

    # -- versions ----------------------------------------------------------------------

    def current_version(self) -> int | None:
        hint = self.ctx.io.try_read_bytes(f"{self.dir}/version-hint.text")
        return int(hint.decode().strip()) if hint else None

    def metadata_path(self, version: int) -> str:
        return f"{self.dir}/v{version}.metadata.json"

    def describe(self) -> str:
        """One line for ``dts table describe``: where the metadata stands against dts."""
        version = self.current_version()
        if version is None:
            return "Iceberg metadata: none written yet (the next commit writes it)"
        meta = json.loads(self.ctx.io.read_bytes(self.metadata_path(version)))
        at = int(meta["current-snapshot-id"])
        latest = self.ctx.snapshot_manager.latest_id()
        state = (
            "up to date" if at == latest else f"behind dts's {latest}: the next commit catches up"
        )
        schema = self.ctx.schema
        merge = bool(schema.primary_key) and not schema.core_options.deletion_vectors
        note = "; only buckets that need no merge are shown (no deletion vectors)" if merge else ""
        return f"Iceberg metadata: {self.metadata_path(version)} at snapshot {at}, {state}{note}"

    # -- the whole sync ----------------------------------------------------------------

    def sync(self, earliest: int | None = None) -> SyncResult:
        """``earliest``: snapshots below it are being expired (left out unless tagged)."""
        ctx = self.ctx
        versions = [ctx.schema_manager.schema(i) for i in ctx.schema_manager.list_ids()]
        ids = FieldIds(versions)
        latest = versions[-1]
        spec = self._spec(latest, ids)
        snapshots = self._snapshots(earliest)
        result = SyncResult(version=(self.current_version() or 0) + 1)
        ctx.io.mkdirs(self.dir)
        for parent, snap in zip([None, *snapshots[:-1]], snapshots, strict=True):
            if not ctx.io.exists(self._list_path(snap.id)):
                left_out = self._write_snapshot(snap, parent, latest, spec)
                result.snapshots_written.append(snap.id)
                if snap is snapshots[-1]:
                    result.files_left_out = left_out
        meta = self._metadata(versions, ids, spec, snapshots)
        ctx.io.write_bytes(self.metadata_path(result.version), json.dumps(meta).encode())
        ctx.io.write_bytes(f"{self.dir}/version-hint.text", str(result.version).encode())
        self._clean(result.version, {s.id for s in snapshots})
        return result

    def _snapshots(self, earliest: int | None) -> list[Snapshot]:
        """The retained snapshots and the tagged ones, oldest first."""
        found = {
            s.id: s for s in self.ctx.snapshot_manager.all() if earliest is None or s.id >= earliest
        }
        for _name, snap in list_tags(self.ctx):
            found.setdefault(snap.id, snap)
        return [found[i] for i in sorted(found)]

    def _clean(self, version: int, kept: set[int]) -> None:
        """Metadata no version a reader may still hold names: versions older than the
        last ``KEEP_VERSIONS``; once snapshots went (expired, untagged), their manifests
        and the delete files none of the kept snapshots' manifests name. Delete manifests
        are read only then: a commit that only adds a snapshot lists the directory."""
        io = self.ctx.io
        listing = io.list_dir(self.dir)
        garbage = [
            i.path
            for i in listing
            if i.base_name.startswith("v")
            and i.base_name.endswith(".metadata.json")
            and int(i.base_name[1 : -len(".metadata.json")]) <= version - KEEP_VERSIONS
        ]
        gone = [
            i.path
            for i in listing
            if i.base_name.endswith(".avro") and _snapshot_of(i.base_name) not in kept
        ]
        if gone:
            named: set[str] = set()
            for i in listing:
                if i.base_name.endswith("-dts-m1.avro") and _snapshot_of(i.base_name) in kept:
                    named |= delete_paths(io.read_bytes(i.path))
            garbage += gone + [
                i.path
                for i in listing
                if i.base_name.startswith("deletes-") and i.path not in named
            ]
        for path in garbage:
            io.delete_file(path)

    def _list_path(self, snapshot_id: int) -> str:
        return f"{self.dir}/snap-{snapshot_id}-dts.avro"

    # -- one snapshot --------------------------------------------------------------------

    def _write_snapshot(
        self, snap: Snapshot, parent: Snapshot | None, schema: TableSchema, spec: dict[str, Any]
    ) -> int:
        """Its manifests, then its manifest list (last: its presence says all is there).
        Returns the data files left out (buckets that need a merge)."""
        data, deletes, left_out = self._files(snap, schema, spec)
        manifests: list[Manifest] = []
        for content, entries, suffix in ((DATA, data, "m0"), (POSITION_DELETES, deletes, "m1")):
            if not entries:
                continue
            path = f"{self.dir}/{snap.id}-dts-{suffix}.avro"
            body, manifest = write_manifest(path, entries, content, snap.id, spec)
            self.ctx.io.write_bytes(path, body)
            manifests.append(manifest)
        parent_id = parent.id if parent is not None else None
        body = write_manifest_list(manifests, snap.id, parent_id, snap.id)
        self.ctx.io.write_bytes(self._list_path(snap.id), body)
        return left_out

    def _files(
        self, snap: Snapshot, schema: TableSchema, spec: dict[str, Any]
    ) -> tuple[list[FileEntry], list[FileEntry], int]:
        ctx = self.ctx
        keys = schema.partition_keys
        groups: dict[tuple[tuple[str | None, ...], int], list[ManifestEntry]] = {}
        for e in ctx.live_entries(snap):
            groups.setdefault((e.partition, e.bucket), []).append(e)
        needs_merge = bool(schema.primary_key) and not schema.core_options.deletion_vectors
        data: list[FileEntry] = []
        deletes: list[FileEntry] = []
        left_out = 0
        for (part, bucket), entries in sorted(groups.items(), key=lambda kv: kv[0][1]):
            files = [e.file for e in entries]
            if needs_merge and not one_sorted_run(files):
                left_out += len(files)
                continue
            values = _partition_values(spec["partition-types"], part)
            for f in files:
                path = ctx.paths.data_file(keys, part, bucket, f.file_name)
                data.append(FileEntry(DATA, path, values, f.row_count, f.file_size, DATA_SEQUENCE))
                skipped = skipped_rows(ctx, path, f)
                if not len(skipped):
                    continue
                dpath = f"{self.dir}/{delete_file_name(f.file_name, skipped)}"
                size = write_position_deletes(ctx, dpath, path, skipped)
                deletes.append(
                    FileEntry(POSITION_DELETES, dpath, values, len(skipped), size, snap.id, path)
                )
        return data, deletes, left_out

    # -- table metadata ------------------------------------------------------------------

    def _spec(self, schema: TableSchema, ids: FieldIds) -> dict[str, Any]:
        arrow = schema.arrow_schema
        fields, avro, types = [], [], []
        for i, k in enumerate(schema.partition_keys):
            t = arrow.field(k).type
            if t not in _AVRO_PARTITION_TYPES:
                raise IcebergMetadataError(
                    f"table {self.ctx.name}: partition column {k} of type {t} has no "
                    "Iceberg identity partition here (boolean, integers, string, date)"
                )
            fid = 1000 + i
            fields.append(
                {"name": k, "transform": "identity", "source-id": ids.ids[(k,)], "field-id": fid}
            )
            avro.append(
                {
                    "name": k,
                    "type": ["null", _AVRO_PARTITION_TYPES[t]],
                    "default": None,
                    "field-id": fid,
                }
            )
            types.append((k, t))
        return {
            "schema": iceberg_schema(schema, ids),
            "partition-spec": fields,
            "avro-partition-fields": avro,
            "partition-types": types,
        }

    def _metadata(
        self,
        versions: Sequence[TableSchema],
        ids: FieldIds,
        spec: dict[str, Any],
        snapshots: Sequence[Snapshot],
    ) -> dict[str, Any]:
        latest = versions[-1]
        current = snapshots[-1] if snapshots else None
        main = self.ctx.snapshot_manager.latest()
        refs: dict[str, Any] = {}
        if main is not None:
            refs["main"] = {"snapshot-id": main.id, "type": "branch"}
        for name, snap in list_tags(self.ctx):
            refs[name] = {"snapshot-id": snap.id, "type": "tag"}
        root = self.ctx.paths.root
        return {
            "format-version": 2,
            "table-uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, root)),
            "location": root,
            "last-sequence-number": current.id if current else 0,
            "last-updated-ms": current.time_millis if current else int(time.time() * 1000),
            "last-column-id": ids.last_id,
            "current-schema-id": latest.id,
            "schemas": [iceberg_schema(v, ids) for v in versions],
            "default-spec-id": 0,
            "partition-specs": [{"spec-id": 0, "fields": spec["partition-spec"]}],
            "last-partition-id": 999 + len(spec["partition-spec"]),
            "default-sort-order-id": 0,
            "sort-orders": [{"order-id": 0, "fields": []}],
            "properties": {
                "schema.name-mapping.default": json.dumps(name_mapping(ids, latest.primary_key)),
                "dts.table": self.ctx.name,
            },
            "current-snapshot-id": main.id if main is not None else -1,
            "refs": refs,
            "snapshots": [
                self._snapshot_json(s, p)
                for p, s in zip([None, *snapshots], snapshots, strict=False)
            ],
            "snapshot-log": [
                {"timestamp-ms": s.time_millis, "snapshot-id": s.id} for s in snapshots
            ],
            "metadata-log": [],
        }

    def _snapshot_json(self, snap: Snapshot, parent: Snapshot | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "snapshot-id": snap.id,
            "sequence-number": snap.id,
            "timestamp-ms": snap.time_millis,
            "manifest-list": self._list_path(snap.id),
            "summary": {
                "operation": "overwrite",
                "dts.commit-kind": snap.commit_kind,
                **({"dts.barrier": str(snap.barrier)} if snap.barrier is not None else {}),
            },
            "schema-id": snap.schema_id,
        }
        if parent is not None:
            out["parent-snapshot-id"] = parent.id
        return out


def _snapshot_of(name: str) -> int:
    """The snapshot id in ``snap-<id>-dts.avro`` and ``<id>-dts-m<k>.avro``."""
    parts = name.split("-")
    return int(parts[1] if parts[0] == "snap" else parts[0])


def _partition_values(
    types: Sequence[tuple[str, pa.DataType]], values: tuple[str | None, ...]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for (name, t), v in zip(types, values, strict=True):
        if v is None:
            out[name] = None
        elif pa.types.is_date32(t):
            out[name] = pa.scalar(v).cast(t).cast(pa.int32()).as_py()
        else:
            out[name] = pa.scalar(v).cast(t).as_py()
    return out


def sync_iceberg(ctx: TableContext, earliest: int | None = None) -> SyncResult | None:
    """After a commit or an expiration: bring the Iceberg metadata up to date when the
    table asks for it. A failure is logged and left for the next commit to catch up:
    the dts commit stands whatever happens here."""
    try:  # reading the options too: nothing here may fail a commit already published
        if ctx.options.iceberg_storage != "table-location":
            return None
        return IcebergSync(ctx).sync(earliest)
    except Exception as exc:  # any failure: the dts snapshot is already published
        log.warning(
            "table %s: Iceberg metadata not written (%s: %s); the dts commit stands and the "
            "next commit catches up",
            ctx.name,
            type(exc).__name__,
            exc,
        )
        return None
