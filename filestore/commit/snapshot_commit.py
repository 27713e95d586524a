"""SnapshotCommit: turn prepared files into a snapshot, atomically and idempotently.

A commit writes a delta manifest (ADD new files, DELETE replaced ones), a new
manifest list pair, then creates ``snapshot-N`` with create-if-absent. Losing
the race for N means someone else committed first: re-read, check for
conflicts, rebuild on top of the new snapshot, retry. What conflicts: a file
this commit deletes (compaction, overwrite) is no longer live.

Commit order decides which write wins: on primary-key tables, new files of a
bucket whose rows are numbered at or below a committed row of an overlapping
key are rebased (``filestore.commit._rebase``) past the table's greatest sequence
number on the snapshot they commit on, so an acknowledged commit's writes win
over everything committed before it, whenever they were written.

Commits are idempotent by (commit user, identifier): an identifier this user
already committed returns that snapshot and writes nothing.

This is the pure commit: manifests and the snapshot, nothing after it. What
differs between commit kinds is a *producer* (``AppendFiles``,
``CompactFiles``, ``OverwriteFiles``), as in pyiceberg's snapshot producers.
Housekeeping after a commit (auto-compaction, expiration) is
``filestore.maintenance.table_commit``'s, whose ``TableCommit`` wraps this one.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from filestore.commit._rebase import Rebased, needs_rebase, rebase
from filestore.commit.lookup import needs_lookup, stores_changelog, with_changelog
from filestore.commit.messages import CommitMessage
from filestore.errors import BarrierOrderError, CommitConflict, FileStoreError
from filestore.format.manifest import ADD, DELETE, ManifestEntry, ManifestFileMeta, merge_entries
from filestore.format.schema import TableSchema
from filestore.format.snapshot import COMMIT_KINDS, CommitKind, Snapshot
from filestore.iceberg import sync_iceberg
from filestore.state.context import Partition, TableContext
from filestore.state.levels import BucketKey

_MANIFEST_ENTRIES_PER_FILE = 100_000
_MAX_BACKOFF_S = 0.5


# -- producers: what each commit kind does differently ------------------------
class SnapshotProducer:
    """What a commit kind decides while a snapshot is built; the defaults are an APPEND's."""

    kind: CommitKind = CommitKind.APPEND

    def prepare(self, ctx: TableContext, messages: Sequence[CommitMessage]) -> list[CommitMessage]:
        """The messages to commit (before empty ones are dropped)."""
        return list(messages)

    def is_noop(
        self,
        messages: Sequence[CommitMessage],
        barrier: int | None,
        log_offsets: dict[int, int] | None,
    ) -> bool:
        """Nothing to commit: no files, no barrier, no offsets (the latest is returned)."""
        return not messages and barrier is None and log_offsets is None

    def needs_live(self, messages: Sequence[CommitMessage]) -> bool:
        """Whether the live files of the latest snapshot must be read."""
        return any(m.deleted_files for m in messages)

    def check_conflicts(
        self,
        ctx: TableContext,
        messages: Sequence[CommitMessage],
        live: Sequence[ManifestEntry] | None,
    ) -> None:
        """A file this commit deletes must still be live, with the rows it had."""
        if not any(m.deleted_files for m in messages):
            return
        live_files = {e.identifier: e.file for e in (live or [])}
        for m in messages:
            for f in m.deleted_files:
                ident = (m.partition, m.bucket, f.file_name)
                now = live_files.get(ident)
                if now is None:
                    raise CommitConflict(
                        f"table {ctx.name}: file {ident[2]} (partition {list(ident[0])}, "
                        f"bucket {ident[1]}) was removed by a concurrent commit; redo the compaction"
                    )
                if now.deletion_vector != f.deletion_vector:
                    # the rewrite kept rows a concurrent commit has since deleted
                    raise CommitConflict(
                        f"table {ctx.name}: rows of file {ident[2]} (partition "
                        f"{list(ident[0])}, bucket {ident[1]}) were deleted by a concurrent "
                        "commit; redo the compaction"
                    )

    def removed_entries(
        self, schema: TableSchema, live: Sequence[ManifestEntry] | None
    ) -> list[ManifestEntry]:
        """DELETE entries of live files the commit replaces beyond its messages' own."""
        return []

    def barrier(self, latest: Snapshot | None, barrier: int | None) -> int | None:
        """The barrier the snapshot carries."""
        return barrier


class AppendFiles(SnapshotProducer):
    """New files (and the files they replace, if any); nothing to commit is a no-op."""


class _RewriteLive(SnapshotProducer):
    """A commit that rewrites live files: always committed, and it reads the live files."""

    def is_noop(
        self,
        messages: Sequence[CommitMessage],
        barrier: int | None,
        log_offsets: dict[int, int] | None,
    ) -> bool:
        return False

    def needs_live(self, messages: Sequence[CommitMessage]) -> bool:
        return True


class CompactFiles(_RewriteLive):
    """The same rows rewritten: always committed, carries the latest barrier by default."""

    kind = CommitKind.COMPACT

    def barrier(self, latest: Snapshot | None, barrier: int | None) -> int | None:
        if barrier is None and latest is not None:
            return latest.barrier  # compaction changes files, not data
        return barrier


class OverwriteFiles(_RewriteLive):
    """A partition (or the whole table) replaced by the messages' files."""

    kind = CommitKind.OVERWRITE

    def __init__(self, partition: dict[str, str | None] | None = None) -> None:
        self.partition = partition

    def prepare(self, ctx: TableContext, messages: Sequence[CommitMessage]) -> list[CommitMessage]:
        """OVERWRITE commits store no changelog (their input rows omit the rows they
        replace, so changes() diffs across them): delete what the writer stored."""
        keys = ctx.schema.partition_keys
        for m in messages:
            for f in m.changelog_files:
                ctx.io.delete_file(ctx.paths.data_file(keys, m.partition, m.bucket, f.file_name))
        return [replace(m, changelog_files=()) for m in messages]

    def removed_entries(
        self, schema: TableSchema, live: Sequence[ManifestEntry] | None
    ) -> list[ManifestEntry]:
        return [
            ManifestEntry(DELETE, e.partition, e.bucket, e.total_buckets, e.file)
            for e in live or []
            if _partition_matches(schema.partition_keys, e.partition, self.partition)
        ]


def producer_for(
    kind: CommitKind, overwrite_partition: dict[str, str | None] | None = None
) -> SnapshotProducer:
    """The producer of a commit kind."""
    if kind not in COMMIT_KINDS:
        raise FileStoreError(f"commit kind {kind!r} is not one of {', '.join(COMMIT_KINDS)}")
    if kind == CommitKind.OVERWRITE:
        return OverwriteFiles(overwrite_partition)
    if kind == CommitKind.COMPACT:
        return CompactFiles()
    return AppendFiles()


def _partition_matches(
    keys: list[str], partition: Partition, wanted: dict[str, str | None] | None
) -> bool:
    if not wanted:
        return True
    values = dict(zip(keys, partition, strict=True))
    return all(values.get(k) == v for k, v in wanted.items())


# -- the commit ----------------------------------------------------------------
@dataclass
class CommitOutcome:
    """What ``SnapshotCommit.publish`` did."""

    snapshot: Snapshot | None
    created: bool = False  # this call committed ``snapshot`` (else it existed already)
    messages: list[CommitMessage] = field(default_factory=list)  # as committed (rebased)


@dataclass
class _Manifests:
    """The manifest lists of a snapshot being built, and every file written for it."""

    base: str
    delta: str
    changelog: str | None
    written: list[str]


@dataclass
class _Attempt:
    """One attempt's snapshot, before it is published, and what it was built from."""

    snapshot: Snapshot
    manifests: _Manifests
    rebased: Rebased
    entries: list[ManifestEntry]  # what it adds and removes
    live: list[ManifestEntry] | None  # the files live at its parent, when it read them


class SnapshotCommit:
    """Commits CommitMessages of one table as one commit user (manifests + snapshot only)."""

    def __init__(self, ctx: TableContext, commit_user: str) -> None:
        self.ctx = ctx
        self.commit_user = commit_user
        self.io = ctx.io
        self.snapshots = ctx.snapshot_manager
        self.manifests = ctx.manifest_store

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
    def publish(
        self,
        producer: SnapshotProducer,
        messages: Sequence[CommitMessage],
        identifier: int,
        barrier: int | None = None,
        log_offsets: dict[int, int] | None = None,
        *,
        check_identifier: bool = True,
    ) -> CommitOutcome:
        """``commit`` with an explicit producer; says whether a snapshot was created."""
        messages = [m for m in producer.prepare(self.ctx, messages) if not m.is_empty]
        max_retries = self.ctx.options.commit_max_retries
        for _attempt in range(max_retries + 1):
            latest = self.snapshots.latest()
            if check_identifier and latest is not None:
                done, snap = self._find_identifier(identifier)
                if done:
                    return CommitOutcome(snap or latest)
            if producer.is_noop(messages, barrier, log_offsets):
                return CommitOutcome(latest)
            schema = self.ctx.schema
            built = self._build(
                producer, schema, latest, messages, identifier, barrier, log_offsets
            )
            if self.snapshots.try_commit(built.snapshot):
                # the originals stay until the snapshot exists: a crash before it
                # leaves the messages committable as they are
                self._delete_data(built.rebased.replaced)
                self._forget_dead_files(built)
                if schema.core_options.iceberg_storage != "disabled":
                    sync_iceberg(self.ctx)  # never fails the commit: see filestore.iceberg
                return CommitOutcome(built.snapshot, True, built.rebased.messages)
            for name in built.manifests.written:  # lost the race: our manifests are garbage
                self.io.delete_file(self.ctx.paths.manifest(name))
            self._delete_data(built.rebased.written)
            # racers that retry in lockstep keep colliding (an attempt takes several
            # round trips on an object store): wait a random, growing while
            time.sleep(random.uniform(0, min(_MAX_BACKOFF_S, 0.005 * 2**_attempt)))
        raise CommitConflict(
            f"table {self.ctx.name}: gave up after {max_retries} retries against concurrent "
            "commits; retry the commit"
        )

    def abort(self, messages: Sequence[CommitMessage]) -> None:
        """Delete the files the messages added (they were never committed)."""
        self._delete_data(
            [((m.partition, m.bucket), f.file_name)
             for m in messages for f in (*m.new_files, *m.changelog_files)]
        )  # fmt: skip

    def _forget_dead_files(self, built: _Attempt) -> None:
        """Take the files no longer live out of the handle's file cache: those this commit
        removed and, when it read every live file, any other kept that is not live, which
        another handle's commit removed (a compaction in another process; a stream's
        commits run in more than one of Spark's Python workers, each missing the other's
        compactions: soak runs 16-17, dead files filled each worker's budget). Files
        written for a commit still to come stay (``FileCache.retain``)."""
        # a file whose deletion vector grew is deleted, then added again: it stays
        added = {e.identifier for e in merge_entries(built.entries)}
        removed = {e.identifier for e in built.entries if e.kind == DELETE} - added
        cache = self.ctx.file_cache
        cache.discard(self.ctx.data_path(*key) for key in removed)
        if built.live is not None:
            live = merge_entries([*built.live, *built.entries])
            cache.retain({self.ctx.data_path(*e.identifier) for e in live})

    # -- building a snapshot --------------------------------------------
    def _delete_data(self, files: Sequence[tuple[BucketKey, str]]) -> None:
        paths = [self.ctx.data_path(partition, bucket, name) for (partition, bucket), name in files]
        self.ctx.file_cache.discard(paths)
        for path in paths:
            self.io.delete_file(path)

    def _build(
        self,
        producer: SnapshotProducer,
        schema: TableSchema,
        latest: Snapshot | None,
        messages: list[CommitMessage],
        identifier: int,
        barrier: int | None,
        log_offsets: dict[int, int] | None,
    ) -> _Attempt:
        lagging = bool(schema.primary_key) and needs_rebase(latest, messages)
        lookup = needs_lookup(self.ctx, producer.kind, messages)
        needs_live = producer.needs_live(messages) or lagging or lookup
        live = self.ctx.live_entries(latest) if needs_live else None
        producer.check_conflicts(self.ctx, messages, live)
        self._check_barrier_order(latest, barrier)
        rebased = rebase(self.ctx, latest, messages, live or []) if lagging else Rebased(messages)
        if lookup:
            # against `latest`, the snapshot this attempt commits on: a lost race redoes it
            rebased = with_changelog(self.ctx, rebased, live or [], producer.kind)
        entries = producer.removed_entries(schema, live)
        for old, grown in rebased.revectored:  # a file whose deletion vector grew
            entries.append(replace(old, kind=DELETE))
            entries.append(replace(old, kind=ADD, file=grown))
        for m in rebased.messages:
            for f in m.deleted_files:
                entries.append(ManifestEntry(DELETE, m.partition, m.bucket, m.total_buckets, f))
            for f in m.new_files:
                entries.append(ManifestEntry(ADD, m.partition, m.bucket, m.total_buckets, f))
        changelog = [
            ManifestEntry(ADD, m.partition, m.bucket, m.total_buckets, f)
            for m in rebased.messages
            for f in m.changelog_files
        ]
        # a looked-up changelog is stored even when empty: "no change", not "unknown"
        stored = lookup and stores_changelog(self.ctx, producer.kind)
        manifests = self._write_manifests(latest, schema.id, entries, changelog, stored)
        snapshot = self._snapshot(
            latest,
            schema.id,
            manifests,
            entries,
            changelog,
            producer.kind,
            identifier,
            producer.barrier(latest, barrier),
            log_offsets,
        )
        return _Attempt(snapshot, manifests, rebased, entries, live)

    def _check_barrier_order(self, latest: Snapshot | None, barrier: int | None) -> None:
        if barrier is None:
            return
        held = self._newest_barrier(latest)
        if held is None or held.barrier is None or barrier > held.barrier:
            return
        # barrier ids are strictly increasing per table: a repeated one would make
        # snapshot_at_barrier ambiguous and a consistent read see half a barrier
        raise BarrierOrderError(
            f"table {self.ctx.name}: barrier {barrier} is not newer than the table's "
            f"barrier {held.barrier} (snapshot {held.id}); barrier ids must strictly "
            "increase per table (retry with the same commit identifier to make a commit "
            "idempotent)"
        )

    def _newest_barrier(self, latest: Snapshot | None) -> Snapshot | None:
        """The newest snapshot carrying a barrier, from ``latest`` back: an APPEND without
        one (a batch write) must not let an older barrier in after it, since readers of
        barriers walk back from the latest snapshot and stop below the one they look for."""
        if latest is None or latest.barrier is not None:
            return latest
        older = self.snapshots.iter_backwards(latest.id - 1)
        return next((s for s in older if s.barrier is not None), None)

    def _write_manifests(
        self,
        latest: Snapshot | None,
        schema_id: int,
        entries: list[ManifestEntry],
        changelog: list[ManifestEntry],
        store_empty_changelog: bool = False,
    ) -> _Manifests:
        written: list[str] = []
        delta_meta = self.manifests.write_manifest(entries, schema_id)
        written.append(delta_meta.file_name)
        delta_list = self.manifests.write_list([delta_meta])
        written.append(delta_list)
        base_metas = self._base_metas(latest, schema_id, written)
        base_list = self.manifests.write_list(base_metas)
        written.append(base_list)
        changelog_list = None
        if changelog or store_empty_changelog:
            changelog_meta = self.manifests.write_manifest(changelog, schema_id)
            written.append(changelog_meta.file_name)
            changelog_list = self.manifests.write_list([changelog_meta])
            written.append(changelog_list)
        return _Manifests(base_list, delta_list, changelog_list, written)

    def _snapshot(
        self,
        latest: Snapshot | None,
        schema_id: int,
        manifests: _Manifests,
        entries: list[ManifestEntry],
        changelog: list[ManifestEntry],
        kind: CommitKind,
        identifier: int,
        barrier: int | None,
        log_offsets: dict[int, int] | None,
    ) -> Snapshot:
        added = sum(e.file.row_count for e in entries if e.kind == ADD)
        removed = sum(e.file.row_count for e in entries if e.kind == DELETE)
        max_seq = max(
            [latest.max_sequence_number if latest else -1]
            + [e.file.max_sequence_number for e in entries if e.kind == ADD]
        )
        offsets = dict(latest.log_offsets or {}) if latest and latest.log_offsets else None
        if log_offsets is not None:
            offsets = {**(offsets or {}), **{int(k): int(v) for k, v in log_offsets.items()}}
        return Snapshot(
            id=(latest.id + 1) if latest else 1,
            schema_id=schema_id,
            base_manifest_list=manifests.base,
            delta_manifest_list=manifests.delta,
            changelog_manifest_list=manifests.changelog,
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

    def _base_metas(
        self, latest: Snapshot | None, schema_id: int, written: list[str]
    ) -> list[ManifestFileMeta]:
        """Previous base + previous delta; merged into full manifests when they pile up."""
        if latest is None:
            return []
        metas = self.manifests.read_list(latest.base_manifest_list) + self.manifests.read_list(
            latest.delta_manifest_list
        )
        if len(metas) < self.ctx.options.manifest_merge_min_count:
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
