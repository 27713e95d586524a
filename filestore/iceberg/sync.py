"""Bring a table's Iceberg metadata (``<table>/metadata/``) up to its dts snapshots.

Run after every commit and every expiration of a table with
``metadata.iceberg.storage=table-location``. Each retained dts snapshot (and each
tagged one) is one Iceberg snapshot of the same id, written once: a manifest list
``snap-<id>-dts.avro`` naming one data manifest and one position-delete manifest, or,
when a reader sees exactly what it saw at the parent, the parent's list. Most commits
of a primary-key table without deletion vectors write only buckets that then need a
merge, which stay hidden; a list for them was one of the four files such a sync wrote
or deleted (the list, the metadata file, the hint, the oldest version).
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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from filestore.errors import SnapshotNotFound
from filestore.format.data_file import DataFileMeta
from filestore.format.manifest import ManifestEntry
from filestore.format.schema import TableSchema
from filestore.format.snapshot import Snapshot
from filestore.iceberg.deletes import (
    MAX_CHAIN,
    DeleteChain,
    delete_file_prefix,
    grown_chain,
    whole_chain,
)
from filestore.iceberg.manifests import (
    DATA,
    POSITION_DELETES,
    FileEntry,
    Manifest,
    delete_paths,
    write_manifest,
    write_manifest_list,
)
from filestore.iceberg.metadata_json import snapshot_entry, table_metadata
from filestore.iceberg.schema import (
    FieldIds,
    iceberg_schema,
    name_mapping,
    partition_spec,
    partition_values,
)
from filestore.iceberg.state import (
    SyncState,
    encode_metadata,
    forget_state,
    keep_state,
    list_owner,
    list_written,
    snapshot_of,
    take_state,
)
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

        A snapshot already written keeps its entry, manifests and encoding: a commit
        writes and encodes its own snapshot, the metadata file and the hint. What the
        handle's previous sync wrote is reused only while the files agree
        (``filestore.iceberg.state``); else the sync starts from the files."""
        ctx = self.ctx
        current = self.current_version()
        state = take_state(ctx)
        fresh = state is None or not self._still_holds(state, current)
        if state is None or fresh:
            state = self._load(current)
        versions = self._versions(state)
        ids, spec, schemas, mapping = self._schemas(state, versions)
        tags = list_tags(ctx)
        tagged = {snap.id: snap for _, snap in tags}
        retained = self._retained(state, fresh or earliest is not None, earliest)
        known = self._unreused(state, retained)
        result = SyncResult(version=(current or 0) + 1)
        if fresh:
            ctx.io.mkdirs(self.dir)
        entries: list[dict[str, Any]] = []
        runs: dict[tuple[str, ...], bool] = {}
        for sid in sorted({*retained, *tagged}):
            entry = known.get(sid)
            if entry is not None and not list_written(entry, state):
                entry = None
            if entry is None:
                snap = tagged.get(sid) or self._snapshot(sid)
                if snap is None:  # expired meanwhile
                    continue
                parent = int(entries[-1]["snapshot-id"]) if entries else None
                result.files_left_out, listed = self._write_snapshot(
                    snap, parent, versions[-1], spec, state, runs
                )
                result.snapshots_written.append(sid)
                entry = snapshot_entry(snap, parent, listed)
                state.encoded.pop(sid, None)
            entries.append(entry)
        main = max(retained, default=None)
        head = table_metadata(ctx, versions[-1], ids, spec, schemas, mapping, entries, main, tags)
        body = encode_metadata(head, entries, state.encoded)
        # the hint publishes the version (atomically): what it names is written before it
        ctx.io.write_unpublished(self.metadata_path(result.version), body)
        ctx.io.write_bytes(f"{self.dir}/version-hint.text", str(result.version).encode())
        state.versions.add(result.version)
        kept = {int(e["snapshot-id"]) for e in entries}
        self._clean(result.version, {list_owner(e) for e in entries}, state)
        state.version, state.written, state.retained = result.version, body, retained
        state.entries = {int(e["snapshot-id"]): e for e in entries}
        state.encoded = {sid: state.encoded[sid] for sid in kept}
        state.runs = runs
        keep_state(ctx, state)
        return result

    def _still_holds(self, state: SyncState, current: int | None) -> bool:
        """The handle's state describes the files: the hint names its version and that
        file is what it wrote (another writer of the same version number differs)."""
        if current != state.version:
            return False
        return self.ctx.io.try_read_bytes(self.metadata_path(current)) == state.written

    def _load(self, current: int | None) -> SyncState:
        """The state from the files: the current metadata parsed, the directory listed."""
        meta = self._read(current) if current else {}
        entries = {int(e["snapshot-id"]): e for e in meta.get("snapshots", [])}
        state = SyncState(current or 0, b"", entries, sorted(entries))
        state.add_names((i.base_name, int(i.size or 0)) for i in self.ctx.io.list_dir(self.dir))
        return state

    def _retained(self, state: SyncState, listing: bool, earliest: int | None) -> list[int]:
        """The dts snapshots to name. From the listing of snapshots when the state is
        new or snapshots expire here; else the state's, less those an expiration
        elsewhere is deleting (below EARLIEST), plus those committed since, up to the
        latest (ids are consecutive: only expiration, from below, and rollback, from
        above, remove snapshots)."""
        manager = self.ctx.snapshot_manager
        if listing or not state.retained:
            return [i for i in manager.list_ids() if earliest is None or i >= earliest]
        latest = manager.latest_id()
        if latest is None:
            return []
        below = manager.expiring_below() or 0
        newest = state.retained[-1]
        kept = [i for i in state.retained if below <= i <= latest]
        return kept + list(range(max(newest + 1, below), latest + 1))

    def _unreused(self, state: SyncState, retained: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The state's entries less those whose id a rollback freed and a later commit
        reused: a rollback removes the newest snapshots, so walking down from the
        newest entry, the first one whose dts snapshot is still the same ends it."""
        known = dict(state.entries)
        in_retained = set(retained)
        for sid in sorted(known, reverse=True):
            if sid not in in_retained:
                continue
            snap = self._snapshot(sid)
            if snap is not None and snap.time_millis == known[sid]["timestamp-ms"]:
                break
            del known[sid]
            state.encoded.pop(sid, None)
        return known

    def _versions(self, state: SyncState) -> list[TableSchema]:
        """The table's schema versions, each read once per state: a version never changes
        under its id, and a table replaced under the same path (RTAS) brings other
        Iceberg metadata, which sends the sync back to a new state."""
        manager, known = self.ctx.schema_manager, state.schema_versions
        versions = [known.get(i) or manager.schema(i) for i in manager.list_ids()]
        state.schema_versions = {v.id: v for v in versions}
        return versions

    def _schemas(self, state: SyncState, versions: Sequence[TableSchema]) -> tuple[Any, ...]:
        """Field ids, partition spec, Iceberg schemas and name mapping of the schema
        versions (computed once per set of versions)."""
        key = tuple(v.id for v in versions)
        done = state.schemas.get(key)
        if done is None:
            ids = FieldIds(versions)
            latest = versions[-1]
            done = (
                ids,
                partition_spec(self.ctx.name, latest, ids),
                [iceberg_schema(v, ids) for v in versions],
                json.dumps(name_mapping(ids, latest.primary_key)),
            )
            state.schemas = {key: done}
        return done

    def _read(self, version: int) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.ctx.io.read_bytes(self.metadata_path(version)))
        return data

    def _snapshot(self, snapshot_id: int) -> Snapshot | None:
        try:
            return self.ctx.snapshot_manager.get(snapshot_id)
        except SnapshotNotFound:
            return None

    def _clean(self, version: int, kept: set[int], state: SyncState) -> None:
        """Metadata no version a reader may still hold names: versions older than the
        last ``KEEP_VERSIONS``; once snapshots went (expired, untagged), the lists and
        manifests of every snapshot not in ``kept`` (the owners of the kept snapshots'
        lists: a snapshot may name its parent's) and the delete files none of the kept
        manifests name. Delete manifests are read only then: a commit that only adds a
        snapshot deletes one old version."""
        io = self.ctx.io
        old = sorted(v for v in state.versions if v <= version - KEEP_VERSIONS)
        garbage = [self.metadata_path(v) for v in old]
        state.versions.difference_update(old)
        if set(state.avro) - kept:  # the delete files a kept manifest names, new ones too
            listing = io.list_dir(self.dir)
            named: set[str] = set()
            for i in listing:
                if i.base_name.endswith("-dts-m1.avro") and snapshot_of(i.base_name) in kept:
                    named |= delete_paths(io.read_bytes(i.path))
            doomed = {
                i.path
                for i in listing
                if (i.base_name.endswith(".avro") and snapshot_of(i.base_name) not in kept)
                or (i.base_name.startswith("deletes-") and i.path not in named)
            }
            garbage += sorted(doomed)
            state.avro, state.deletes = {}, {}
            state.chains = {  # a chain naming a file deleted here starts again whole
                path: chain
                for path, chain in state.chains.items()
                if not any(f"{self.dir}/{name}" in doomed for name, _, _ in chain.files)
            }
            state.add_names(
                (i.base_name, int(i.size or 0))
                for i in listing
                if i.path not in doomed and not i.base_name.startswith("v")
            )
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
        state: SyncState,
        runs: dict[tuple[str, ...], bool],
    ) -> tuple[int, str]:
        """Its manifests, then its manifest list (last: its presence says all is there),
        or nothing when a reader sees what it saw at the parent: the parent's list then
        serves (a delete file's sequence number may be the parent's, as it is at or above
        every data file's). Returns the data files left out (buckets that need a merge)
        and the list's path."""
        data, deletes, left_out = self._files(snap, schema, spec, state, runs)
        visible = (schema.id, data, [replace(d, sequence_number=0) for d in deletes])
        last = state.last_visible
        if last is not None and last[0] == parent_id and last[2] == visible:
            state.last_visible = (snap.id, last[1], visible)
            return left_out, last[1]
        manifests: list[Manifest] = []
        written: list[tuple[str, int]] = []
        for content, entries, suffix in ((DATA, data, "m0"), (POSITION_DELETES, deletes, "m1")):
            if not entries:
                continue
            name = f"{snap.id}-dts-{suffix}.avro"
            body, manifest = write_manifest(f"{self.dir}/{name}", entries, content, snap.id, spec)
            self.ctx.io.write_unpublished(f"{self.dir}/{name}", body)
            manifests.append(manifest)
            written.append((name, len(body)))
        body = write_manifest_list(manifests, snap.id, parent_id, snap.id)
        listed = self._list_path(snap.id)
        self.ctx.io.write_unpublished(listed, body)
        state.add_names([*written, (f"snap-{snap.id}-dts.avro", len(body))])
        state.last_visible = (snap.id, listed, visible)
        return left_out, listed

    def _files(
        self,
        snap: Snapshot,
        schema: TableSchema,
        spec: dict[str, Any],
        state: SyncState,
        runs: dict[tuple[str, ...], bool],
    ) -> tuple[list[FileEntry], list[FileEntry], int]:
        ctx = self.ctx
        keys = schema.partition_keys
        groups: dict[tuple[tuple[str | None, ...], int], list[ManifestEntry]] = {}
        for e in ctx.live_entries(snap):
            groups.setdefault((e.partition, e.bucket), []).append(e)
        needs_merge = bool(schema.primary_key) and not schema.core_options.deletion_vectors
        data: list[FileEntry] = []
        deletes: list[FileEntry] = []
        chains: dict[str, DeleteChain] = {}
        left_out = 0
        for (part, bucket), entries in sorted(groups.items(), key=lambda kv: kv[0][1]):
            files = [e.file for e in entries]
            if needs_merge and not self._one_run(files, state, runs):
                left_out += len(files)
                continue
            values = partition_values(spec["partition-types"], part)
            for f in files:
                path = ctx.paths.data_file(keys, part, bucket, f.file_name)
                data.append(FileEntry(DATA, path, values, f.row_count, f.file_size, DATA_SEQUENCE))
                chain = self._deletes(path, f, state)
                if chain is None:
                    continue
                chains[path] = chain
                deletes += [
                    FileEntry(
                        POSITION_DELETES, f"{self.dir}/{n}", values, count, size, snap.id, path
                    )
                    for n, count, size in chain.files
                ]
        state.chains = chains  # this snapshot's: the next one grows them
        return data, deletes, left_out

    @staticmethod
    def _one_run(
        files: Sequence[DataFileMeta], state: SyncState, runs: dict[tuple[str, ...], bool]
    ) -> bool:
        """``one_sorted_run``, once per set of files: a commit leaves most buckets as
        they were, and deciding reads every file's key range."""
        key = tuple(f.file_name for f in files)
        found = state.runs.get(key)
        if found is None:
            found = one_sorted_run(files)
        runs[key] = found
        return found

    def _deletes(self, path: str, f: DataFileMeta, state: SyncState) -> DeleteChain | None:
        """The position delete files of a data file (``filestore.iceberg.deletes``): the
        previous snapshot's chain when the vector did not change (nothing to read), grown
        by a file of what it gained, else one file written whole (or found written by
        an earlier sync); None when dts reads every row of the file."""
        if not f.deletion_vector and not f.delete_row_count:
            return None
        chain = state.chains.get(path)
        if chain is not None and chain.vector == f.deletion_vector:
            return chain
        if chain is not None and len(chain.files) < MAX_CHAIN:
            grown = grown_chain(self.ctx, self.dir, path, f, chain)
            if grown is not None:
                state.add_names((name, size) for name, _, size in grown.files[-1:])
                return grown
        known = state.deletes.get(delete_file_prefix(f))
        if known is not None:  # written whole before, for this very vector
            name, size = known
            count = int(name[name.rindex("-") + 1 : -len(".parquet")])
            return DeleteChain(f.deletion_vector, None, ((name, count, size),))
        chain = whole_chain(self.ctx, self.dir, path, f)
        state.add_names((name, size) for name, _, size in chain.files)
        return chain


def drop_iceberg_metadata(ctx: TableContext) -> None:
    """Remove the Iceberg metadata of a table that stopped writing it: left in place it
    would show engines an ever older table. The version hint goes first, so a reader
    finds no table rather than part of one."""
    forget_state(ctx)
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
