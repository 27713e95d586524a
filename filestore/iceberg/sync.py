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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from filestore.errors import IcebergMetadataError, SnapshotNotFound
from filestore.format.data_file import DataFileMeta
from filestore.format.manifest import ManifestEntry
from filestore.format.schema import TableSchema
from filestore.format.snapshot import Snapshot
from filestore.iceberg.deletes import delete_file_prefix, skipped_rows, write_position_deletes
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
from filestore.read.split import one_sorted_run
from filestore.state.context import TableContext
from filestore.state.tags import list_tags

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

    def current_snapshot_id(self, version: int) -> int:
        """The dts snapshot metadata version ``version`` shows (-1: none yet)."""
        return int(self._read(version)["current-snapshot-id"])

    def describe(self) -> str:
        """One line for ``dts table describe``: where the metadata stands against dts."""
        version = self.current_version()
        if version is None:
            return "Iceberg metadata: none written yet (the next commit writes it)"
        at = self.current_snapshot_id(version)
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
        """``earliest``: snapshots below it are being expired (left out unless tagged).

        A snapshot already written keeps its entry from the previous version: a commit
        reads the previous metadata, lists the snapshot ids and writes what is new."""
        ctx = self.ctx
        versions = [ctx.schema_manager.schema(i) for i in ctx.schema_manager.list_ids()]
        ids = FieldIds(versions)
        spec = self._spec(versions[-1], ids)
        current = self.current_version()
        known = {
            int(e["snapshot-id"]): e
            for e in (self._read(current).get("snapshots", []) if current else [])
        }
        listing = {i.base_name: i for i in ctx.io.list_dir(self.dir)}
        delete_files = _delete_files(listing)
        tags = list_tags(ctx)
        tagged = {snap.id: snap for _, snap in tags}
        retained = [i for i in ctx.snapshot_manager.list_ids() if earliest is None or i >= earliest]
        result = SyncResult(version=(current or 0) + 1)
        ctx.io.mkdirs(self.dir)
        entries: list[dict[str, Any]] = []
        for sid in sorted({*retained, *tagged}):
            entry = known.get(sid) if f"snap-{sid}-dts.avro" in listing else None
            if entry is None:
                snap = tagged.get(sid) or self._snapshot(sid)
                if snap is None:  # expired meanwhile
                    continue
                parent = int(entries[-1]["snapshot-id"]) if entries else None
                result.files_left_out = self._write_snapshot(
                    snap, parent, versions[-1], spec, delete_files
                )
                result.snapshots_written.append(sid)
                entry = self._snapshot_json(snap, parent)
            entries.append(entry)
        main = max(retained, default=None)
        meta = self._metadata(versions, ids, spec, entries, main, tags)
        # the hint publishes the version (atomically): what it names is written before it
        ctx.io.write_unpublished(self.metadata_path(result.version), json.dumps(meta).encode())
        ctx.io.write_bytes(f"{self.dir}/version-hint.text", str(result.version).encode())
        self._clean(result.version, {int(e["snapshot-id"]) for e in entries}, listing)
        return result

    def _read(self, version: int) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.ctx.io.read_bytes(self.metadata_path(version)))
        return data

    def _snapshot(self, snapshot_id: int) -> Snapshot | None:
        try:
            return self.ctx.snapshot_manager.get(snapshot_id)
        except SnapshotNotFound:
            return None

    def _clean(self, version: int, kept: set[int], found: Mapping[str, pafs.FileInfo]) -> None:
        """Metadata no version a reader may still hold names: versions older than the
        last ``KEEP_VERSIONS``; once snapshots went (expired, untagged), their manifests
        and the delete files none of the kept snapshots' manifests name. Delete manifests
        are read only then: a commit that only adds a snapshot reads the listing the sync
        made before it wrote."""
        io = self.ctx.io
        listing = list(found.values())  # as the sync found it: what it wrote is all kept
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
        if gone:  # the delete files a kept manifest names, this sync's new ones too
            listing = io.list_dir(self.dir)
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
        self,
        snap: Snapshot,
        parent_id: int | None,
        schema: TableSchema,
        spec: dict[str, Any],
        delete_files: Mapping[str, tuple[str, pafs.FileInfo]],
    ) -> int:
        """Its manifests, then its manifest list (last: its presence says all is there).
        Returns the data files left out (buckets that need a merge)."""
        data, deletes, left_out = self._files(snap, schema, spec, delete_files)
        manifests: list[Manifest] = []
        for content, entries, suffix in ((DATA, data, "m0"), (POSITION_DELETES, deletes, "m1")):
            if not entries:
                continue
            path = f"{self.dir}/{snap.id}-dts-{suffix}.avro"
            body, manifest = write_manifest(path, entries, content, snap.id, spec)
            self.ctx.io.write_unpublished(path, body)
            manifests.append(manifest)
        body = write_manifest_list(manifests, snap.id, parent_id, snap.id)
        self.ctx.io.write_unpublished(self._list_path(snap.id), body)
        return left_out

    def _files(
        self,
        snap: Snapshot,
        schema: TableSchema,
        spec: dict[str, Any],
        delete_files: Mapping[str, tuple[str, pafs.FileInfo]],
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
                found = self._deletes(path, f, delete_files)
                if found is not None:
                    dpath, count, size = found
                    deletes.append(
                        FileEntry(POSITION_DELETES, dpath, values, count, size, snap.id, path)
                    )
        return data, deletes, left_out

    def _deletes(
        self, path: str, f: DataFileMeta, delete_files: Mapping[str, tuple[str, pafs.FileInfo]]
    ) -> tuple[str, int, int] | None:
        """The position delete file of a data file (path, positions, size): the one an
        earlier snapshot wrote for the same vector, else written now; None when dts
        reads every row of the file."""
        if not f.deletion_vector and not f.delete_row_count:
            return None
        prefix = delete_file_prefix(f)
        known = delete_files.get(prefix)
        if known is not None:  # the vector unchanged: nothing to read
            name, info = known
            return info.path, int(name[len(prefix) : -len(".parquet")]), int(info.size or 0)
        skipped = skipped_rows(self.ctx, path, f)
        dpath = f"{self.dir}/{prefix}{len(skipped)}.parquet"
        return dpath, len(skipped), write_position_deletes(self.ctx, dpath, path, skipped)

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
        entries: Sequence[dict[str, Any]],
        main: int | None,
        tags: Sequence[tuple[str, Snapshot]],
    ) -> dict[str, Any]:
        latest = versions[-1]
        current = entries[-1] if entries else None
        refs: dict[str, Any] = {}
        if main is not None:
            refs["main"] = {"snapshot-id": main, "type": "branch"}
        for name, snap in tags:
            refs[name] = {"snapshot-id": snap.id, "type": "tag"}
        root = self.ctx.paths.root
        return {
            "format-version": 2,
            "table-uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, root)),
            "location": root,
            "last-sequence-number": current["sequence-number"] if current else 0,
            "last-updated-ms": current["timestamp-ms"] if current else int(time.time() * 1000),
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
            "current-snapshot-id": main if main is not None else -1,
            "refs": refs,
            "snapshots": list(entries),
            "snapshot-log": [
                {"timestamp-ms": e["timestamp-ms"], "snapshot-id": e["snapshot-id"]}
                for e in entries
            ],
            "metadata-log": [],
        }

    def _snapshot_json(self, snap: Snapshot, parent_id: int | None) -> dict[str, Any]:
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
        if parent_id is not None:
            out["parent-snapshot-id"] = parent_id
        return out


def _snapshot_of(name: str) -> int:
    """The snapshot id in ``snap-<id>-dts.avro`` and ``<id>-dts-m<k>.avro``."""
    parts = name.split("-")
    return int(parts[1] if parts[0] == "snap" else parts[0])


def _delete_files(listing: Mapping[str, pafs.FileInfo]) -> dict[str, tuple[str, pafs.FileInfo]]:
    """The listing's delete files (name, info) by name prefix (``delete_file_prefix``): a
    commit looks up every data file with a vector, so the listing is indexed once."""
    return {
        name[: name.rindex("-") + 1]: (name, info)
        for name, info in listing.items()
        if name.startswith("deletes-") and name.endswith(".parquet")
    }


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


def drop_iceberg_metadata(ctx: TableContext) -> None:
    """Remove the Iceberg metadata of a table that stopped writing it: left in place it
    would show engines an ever older table. The version hint goes first, so a reader
    finds no table rather than part of one."""
    directory = f"{ctx.paths.root}/{METADATA_DIR}"
    if ctx.io.exists(f"{directory}/version-hint.text"):
        ctx.io.delete_file(f"{directory}/version-hint.text")
    if ctx.io.exists(directory):
        ctx.io.delete_dir(directory)


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
