"""TableCommit: the pure snapshot commit, then the housekeeping that follows a commit.

As Paimon's ``TableCommitImpl`` wraps a pure ``FileStoreCommit`` and expires
snapshots after it: ``filestore.commit.snapshot_commit.SnapshotCommit`` writes manifests and
the snapshot; when it created one, this layer runs

1. auto-compaction (``auto-compaction``, default true; not after a COMPACT
   commit) of the buckets the commit wrote that reached
   ``num-sorted-run.compaction-trigger`` (every commit's level-0 files with
   ``changelog-producer=lookup``), committed as a separate COMPACT snapshot by
   commit user ``<user>-compact`` through the pure commit;
2. snapshot expiration per the ``snapshot.*`` retention options.

Both are housekeeping: the commit already succeeded, so a failure here is
logged and left to the next commit (or ``dts table compact/expire``).
Compactions started on their own (``Table.compact``, a writer's stall) are
followed by expiration too (:func:`compact`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from filestore.commit.messages import CommitMessage
from filestore.commit.properties import CommitProperties
from filestore.commit.snapshot_commit import SnapshotCommit, producer_for
from filestore.errors import FileStoreError
from filestore.format.snapshot import CommitKind, Snapshot
from filestore.maintenance.compaction import (
    Compactor,
    CompactResult,
    Progress,
    compact_after_commit,
)
from filestore.maintenance.expire import expire_after_commit
from filestore.state.context import TableContext
from filestore.state.levels import BucketKey

log = logging.getLogger(__name__)


def after_commit(
    ctx: TableContext,
    snapshot: Snapshot,
    messages: Sequence[CommitMessage],
    kind: CommitKind,
    commit_user: str,
) -> None:
    """Auto-compaction of the buckets just written, then snapshot expiration (logged,
    never raised)."""
    try:
        if ctx.options.auto_compaction and kind != CommitKind.COMPACT:
            touched = {(m.partition, m.bucket) for m in messages if m.new_files}
            compact_after_commit(ctx, snapshot, touched, commit_user)
        expire_after_commit(ctx)
    except FileStoreError as e:
        log.warning("table %s: housekeeping after commit %d failed: %s", ctx.name, snapshot.id, e)


class TableCommit:
    """Commits CommitMessages of one table as one commit user, then does the housekeeping.

    ``commit`` is idempotent by (commit user, identifier); see ``filestore.commit.snapshot_commit``.

    Args:
        ctx: the table (``Table.new_commit`` passes itself).
        commit_user: who commits: identifiers are counted per commit user, and
            auto-compaction commits as ``<commit_user>-compact``.

    Example:
        >>> committer = table.new_commit("loader")
        >>> done = committer.committed_identifier() or 0
        >>> snap = committer.commit(messages, CommitProperties(identifier=done + 1))
    """

    def __init__(self, ctx: TableContext, commit_user: str) -> None:
        self.ctx = ctx
        self.commit_user = commit_user
        self.snapshot_commit = SnapshotCommit(ctx, commit_user)

    def commit(
        self, messages: Sequence[CommitMessage], properties: CommitProperties
    ) -> Snapshot | None:
        """Publish messages as one snapshot (``SnapshotCommit.publish``), then housekeeping.

        Returns the new snapshot; the existing one when ``properties.identifier`` was
        already committed by this user; the latest (possibly None) when there is nothing
        to commit (no files, no barrier, no offsets).

        On an error nothing is published; call ``abort(messages)`` to delete the files.

        Args:
            messages: the files to publish, from ``TableWrite.prepare`` of any writers.
            properties: the commit's identifier, barrier, log offsets and kind.

        Returns:
            The snapshot as above, or None for an empty table with nothing to commit.

        Raises:
            CommitConflict: concurrent commits kept winning (``commit.max-retries``), or
                removed files this commit deletes: redo the write.
            BarrierOrderError: ``properties.barrier`` is not above the table's latest.
        """
        p = properties
        partition = dict(p.overwrite_partition) if p.overwrite_partition is not None else None
        producer = producer_for(p.kind, partition)
        offsets = dict(p.log_offsets) if p.log_offsets is not None else None
        outcome = self.snapshot_commit.publish(
            producer, messages, p.identifier, p.barrier, offsets,
            check_identifier=p.check_identifier,
        )  # fmt: skip
        if outcome.created and outcome.snapshot is not None:
            after_commit(
                self.ctx, outcome.snapshot, outcome.messages, producer.kind, self.commit_user
            )
        return outcome.snapshot

    def abort(self, messages: Sequence[CommitMessage]) -> None:
        """Delete the files the messages added (they were never committed).

        Args:
            messages: messages that were not (and will not be) committed.
        """
        self.snapshot_commit.abort(messages)

    def committed_identifier(self) -> int | None:
        """Greatest identifier this commit user has committed, or None.

        Returns:
            The identifier (where a restarted writer resumes), or None if this user
            never committed.
        """
        return self.snapshot_commit.committed_identifier()


def compact(
    ctx: TableContext,
    commit_user: str,
    *,
    full: bool = False,
    partition: dict[str, str | None] | None = None,
    buckets: Iterable[BucketKey] | None = None,
    progress: Progress | None = None,
) -> CompactResult:
    """Compact (``Compactor.compact``); a COMPACT snapshot committed is followed by expiration."""
    result = Compactor(ctx, commit_user).compact(
        full=full, partition=partition, buckets=buckets, progress=progress
    )
    if result.snapshot is not None:
        after_commit(ctx, result.snapshot, [], CommitKind.COMPACT, commit_user)
    return result
