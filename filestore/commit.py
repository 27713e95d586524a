"""TableCommit: turn prepared files into a snapshot, atomically and idempotently.

A commit writes a delta manifest (ADD new files, DELETE replaced ones), a new
manifest list pair, then creates ``snapshot-N`` with create-if-absent. Losing
the race for N means someone else committed first: re-read, check for
conflicts, rebuild on top of the new snapshot, retry. What conflicts: a file
this commit deletes (compaction, overwrite) is no longer live.

Commit order decides which write wins: on primary-key tables, new files of a
bucket whose rows are numbered at or below a committed row of an overlapping
key are rebased (``filestore.rebase``) past the table's greatest sequence
number on the snapshot they commit on, so an acknowledged commit's writes win
over everything committed before it, whenever they were written.

Commits are idempotent by (commit user, identifier): an identifier this user
already committed returns that snapshot and writes nothing.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from filestore.errors import BarrierOrderError, CommitConflict, FileStoreError
from filestore.manifest import ADD, DELETE, ManifestEntry, ManifestFileMeta, merge_entries
from filestore.messages import CommitMessage
from filestore.rebase import BucketKey, Rebased, needs_rebase, rebase
from filestore.snapshot import APPEND, COMMIT_KINDS, COMPACT, OVERWRITE, Snapshot

if TYPE_CHECKING:
    from filestore.table import Table

_MANIFEST_ENTRIES_PER_FILE = 100_000
_MAX_BACKOFF_S = 0.5

log = logging.getLogger(__name__)


class TableCommit:
    """Commits CommitMessages of one table as one commit user."""

    def __init__(self, table: Table, commit_user: str) -> None:
        self.table = table
        self.commit_user = commit_user
        self.io = table.io
        self.snapshots = table.snapshot_manager
        self.manifests = table.manifest_store

    # -- idempotence ----------------------------------------------------
    def _find_identifier(self, identifier: int) -> tuple[bool, Snapshot | None]:
        """(already committed?, its snapshot) scanning back to this user's last commit."""
        found_user = False
        for snap in self.snapshots.iter_backwards():
            if snap.commit_user != self.commit_user:
                continue
            if snap.commit_identifier == identifier:
                return True, snap
            if snap.commit_identifier < identifier:
                return found_user, None
            found_user = True  # a newer identifier of ours exists: this one is done
        return found_user, None

    def committed_identifier(self) -> int | None:
        """Greatest identifier this commit user has committed, or None."""
        for snap in self.snapshots.iter_backwards():
            if snap.commit_user == self.commit_user:
                return snap.commit_identifier
        return None

    # -- commit ---------------------------------------------------------
    def commit(
        self,
        messages: Sequence[CommitMessage],
        identifier: int,
        barrier: int | None = None,
        log_offsets: dict[int, int] | None = None,
        kind: str = APPEND,
        *,
        overwrite_partition: dict[str, str | None] | None = None,
        check_identifier: bool = True,
    ) -> Snapshot | None:
        """Publish messages as one snapshot; see the module doc for retries and conflicts.

        Returns the new snapshot; the existing one when ``identifier`` was already
        committed by this user; the latest (possibly None) when there is nothing to
        commit (no files, no barrier, no offsets).
        """
        if kind not in COMMIT_KINDS:
            raise FileStoreError(f"commit kind {kind!r} is not one of {', '.join(COMMIT_KINDS)}")
        if kind == OVERWRITE:
            messages = self._without_changelog(messages)
        messages = [m for m in messages if not m.is_empty]
        max_retries = self.table.options.commit_max_retries
        for _attempt in range(max_retries + 1):
            latest = self.snapshots.latest()
            if check_identifier and latest is not None:
                done, snap = self._find_identifier(identifier)
                if done:
                    return snap or latest
            if not messages and barrier is None and log_offsets is None and kind == APPEND:
                return latest
            snapshot, written, rebased = self._build(
                latest, messages, identifier, barrier, log_offsets, kind, overwrite_partition
            )
            if self.snapshots.try_commit(snapshot):
                # the originals stay until the snapshot exists: a crash before it
                # leaves the messages committable as they are
                self._delete_data(rebased.replaced)
                self._after_commit(snapshot, rebased.messages, kind)
                return snapshot
            for name in written:  # lost the race: our manifests are garbage
                self.io.delete_file(self.table.paths.manifest(name))
            self._delete_data(rebased.written)
            # racers that retry in lockstep keep colliding (an attempt takes several
            # round trips on an object store): wait a random, growing while
            time.sleep(random.uniform(0, min(_MAX_BACKOFF_S, 0.005 * 2**_attempt)))
        raise CommitConflict(
            f"table {self.table.name}: gave up after {max_retries} retries against concurrent "
            "commits; retry the commit"
        )

    def abort(self, messages: Sequence[CommitMessage]) -> None:
        """Delete the files the messages added (they were never committed)."""
        keys = self.table.schema.partition_keys
        for m in messages:
            for f in (*m.new_files, *m.changelog_files):
                self.io.delete_file(
                    self.table.paths.data_file(keys, m.partition, m.bucket, f.file_name)
                )

    # -- internals ------------------------------------------------------
    def _delete_data(self, files: Sequence[tuple[BucketKey, str]]) -> None:
        keys = self.table.schema.partition_keys
        for (partition, bucket), name in files:
            self.io.delete_file(self.table.paths.data_file(keys, partition, bucket, name))

    def _after_commit(
        self, snapshot: Snapshot, messages: Sequence[CommitMessage], kind: str
    ) -> None:
        """Auto-compaction of the buckets just written, then snapshot expiration.

        Both are housekeeping: the commit already succeeded, so a failure here is
        logged and left to the next commit (or `dts table compact/expire`).
        """
        from filestore.compaction import compact_after_commit
        from filestore.expire import expire_after_commit

        options = self.table.options
        try:
            if options.auto_compaction and kind != COMPACT:
                touched = {(m.partition, m.bucket) for m in messages if m.new_files}
                compact_after_commit(self.table, snapshot, touched, self.commit_user)
            expire_after_commit(self.table)
        except FileStoreError as e:
            log.warning(
                "table %s: housekeeping after commit %d failed: %s", self.table.name, snapshot.id, e
            )

    def _without_changelog(self, messages: Sequence[CommitMessage]) -> list[CommitMessage]:
        """OVERWRITE commits store no changelog (their input rows omit the rows they
        replace, so changes() diffs across them): delete what the writer stored."""
        keys = self.table.schema.partition_keys
        for m in messages:
            for f in m.changelog_files:
                self.io.delete_file(
                    self.table.paths.data_file(keys, m.partition, m.bucket, f.file_name)
                )
        return [replace(m, changelog_files=()) for m in messages]

    def _live(self, snapshot: Snapshot | None) -> list[ManifestEntry]:
        if snapshot is None:
            return []
        return merge_entries(
            self.manifests.read_entries([snapshot.base_manifest_list, snapshot.delta_manifest_list])
        )

    def _check_conflicts(
        self,
        latest: Snapshot | None,
        messages: list[CommitMessage],
        live: list[ManifestEntry] | None,
    ) -> None:
        deleted = [(m.partition, m.bucket, f.file_name) for m in messages for f in m.deleted_files]
        if deleted:
            live_ids = {e.identifier for e in (live or [])}
            for ident in deleted:
                if ident not in live_ids:
                    raise CommitConflict(
                        f"table {self.table.name}: file {ident[2]} (partition {list(ident[0])}, "
                        f"bucket {ident[1]}) was removed by a concurrent commit; redo the compaction"
                    )

    def _build(
        self,
        latest: Snapshot | None,
        messages: list[CommitMessage],
        identifier: int,
        barrier: int | None,
        log_offsets: dict[int, int] | None,
        kind: str,
        overwrite_partition: dict[str, str | None] | None,
    ) -> tuple[Snapshot, list[str], Rebased]:
        table = self.table
        schema = table.schema
        needs_live = kind in (COMPACT, OVERWRITE) or any(m.deleted_files for m in messages)
        lagging = bool(schema.primary_key) and needs_rebase(latest, messages)
        live = self._live(latest) if needs_live or lagging else None
        self._check_conflicts(latest, messages, live)
        rebased = rebase(table, latest, messages, live or []) if lagging else Rebased(messages)
        messages = rebased.messages
        if (
            latest is not None
            and barrier is not None
            and latest.barrier is not None
            and barrier <= latest.barrier
        ):
            # barrier ids are strictly increasing per table: a repeated one would make
            # snapshot_at_barrier ambiguous and a consistent read see half a barrier
            raise BarrierOrderError(
                f"table {table.name}: barrier {barrier} is not newer than the table's barrier "
                f"{latest.barrier} (snapshot {latest.id}); barrier ids must strictly increase "
                "per table (retry with the same commit identifier to make a commit idempotent)"
            )
        entries: list[ManifestEntry] = []
        if kind == OVERWRITE:
            for e in live or []:
                if _partition_matches(schema.partition_keys, e.partition, overwrite_partition):
                    entries.append(
                        ManifestEntry(DELETE, e.partition, e.bucket, e.total_buckets, e.file)
                    )
        for m in messages:
            for f in m.deleted_files:
                entries.append(ManifestEntry(DELETE, m.partition, m.bucket, m.total_buckets, f))
            for f in m.new_files:
                entries.append(ManifestEntry(ADD, m.partition, m.bucket, m.total_buckets, f))
        written: list[str] = []
        delta_meta = self.manifests.write_manifest(entries, schema.id)
        written.append(delta_meta.file_name)
        delta_list = self.manifests.write_list([delta_meta])
        written.append(delta_list)
        base_metas = self._base_metas(latest, schema.id, written)
        base_list = self.manifests.write_list(base_metas)
        written.append(base_list)
        changelog = [
            ManifestEntry(ADD, m.partition, m.bucket, m.total_buckets, f)
            for m in messages
            for f in m.changelog_files
        ]
        changelog_list = None
        if changelog:
            changelog_meta = self.manifests.write_manifest(changelog, schema.id)
            written.append(changelog_meta.file_name)
            changelog_list = self.manifests.write_list([changelog_meta])
            written.append(changelog_list)
        added = sum(e.file.row_count for e in entries if e.kind == ADD)
        removed = sum(e.file.row_count for e in entries if e.kind == DELETE)
        max_seq = max(
            [latest.max_sequence_number if latest else -1]
            + [e.file.max_sequence_number for e in entries if e.kind == ADD]
        )
        if barrier is None and kind == COMPACT and latest is not None:
            barrier = latest.barrier  # compaction changes files, not data
        offsets = dict(latest.log_offsets or {}) if latest and latest.log_offsets else None
        if log_offsets is not None:
            offsets = {**(offsets or {}), **{int(k): int(v) for k, v in log_offsets.items()}}
        snapshot = Snapshot(
            id=(latest.id + 1) if latest else 1,
            schema_id=schema.id,
            base_manifest_list=base_list,
            delta_manifest_list=delta_list,
            changelog_manifest_list=changelog_list,
            commit_user=self.commit_user,
            commit_identifier=identifier,
            commit_kind=kind,
            time_millis=int(time.time() * 1000),
            barrier=barrier,
            log_offsets=offsets,
            total_record_count=(latest.total_record_count if latest else 0) + added - removed,
            delta_record_count=added - removed,
            changelog_record_count=sum(e.file.row_count for e in changelog),
            max_sequence_number=max_seq,
        )
        return snapshot, written, rebased

    def _base_metas(
        self, latest: Snapshot | None, schema_id: int, written: list[str]
    ) -> list[ManifestFileMeta]:
        """Previous base + previous delta; merged into full manifests when they pile up."""
        if latest is None:
            return []
        metas = self.manifests.read_list(latest.base_manifest_list) + self.manifests.read_list(
            latest.delta_manifest_list
        )
        if len(metas) < self.table.options.manifest_merge_min_count:
            return metas
        live = merge_entries(e for m in metas for e in self.manifests.read_manifest(m.file_name))
        merged = []
        for i in range(0, max(len(live), 1), _MANIFEST_ENTRIES_PER_FILE):
            meta = self.manifests.write_manifest(
                live[i : i + _MANIFEST_ENTRIES_PER_FILE], schema_id
            )
            written.append(meta.file_name)
            merged.append(meta)
        return merged


def _partition_matches(
    keys: list[str], partition: tuple[str | None, ...], wanted: dict[str, str | None] | None
) -> bool:
    if not wanted:
        return True
    values = dict(zip(keys, partition, strict=True))
    return all(values.get(k) == v for k, v in wanted.items())
