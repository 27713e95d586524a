"""One committer per table: turns complete barriers into FileStore snapshots.

The worker that owns bucket 0 of a table runs its committer. Snapshot N is
committed once every bucket published its prepared record for N, with
``identifier = N``, ``barrier = N`` and ``log_offsets`` = each bucket's offset
right after marker N. The FileStore makes commits idempotent by (commit
user, identifier), so a committer that crashed after committing N and retries
writes nothing twice; two committers racing during a rebalance are equally
harmless.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from bridge.worker import faults
from bridge.worker.alignment import missing_buckets, next_committable, stale_barriers
from bridge.worker.prepared import PreparedRecord, PreparedStore
from filestore import CommitKind, CommitProperties

log = logging.getLogger(__name__)

DEFAULT_COMMIT_USER = "dts-worker"
#: while a barrier waits for buckets: how often to look whether the table has it already
RECHECK_S = 1.0


class TableCommitLike(Protocol):
    """The part of ``filestore``'s ``TableCommit`` the committer needs."""

    def commit(self, messages: Sequence[Any], properties: CommitProperties) -> Any: ...

    def committed_identifier(self) -> int | None: ...


class CommitListener(Protocol):
    def __call__(
        self,
        barrier: int,
        seconds: float,
        records: Sequence[PreparedRecord],
        snapshot_id: int | None,
    ) -> None: ...


class TableCommitter:
    """Commits a table's complete barriers in order (call :meth:`commit_ready` often)."""

    def __init__(
        self,
        table: str,
        num_buckets: int,
        store: PreparedStore,
        commit: TableCommitLike,
        decode_message: Callable[[dict[str, Any]], Any],
        on_commit: CommitListener | None = None,
        snapshot_id_at: Callable[[int], int | None] | None = None,
        recheck_s: float = RECHECK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.table = table
        self.num_buckets = num_buckets
        self.store = store
        self._commit = commit
        self._decode = decode_message
        self._on_commit = on_commit
        # snapshot of a barrier another committer got to first (for the MetaService report)
        self._snapshot_id_at = snapshot_id_at
        self.last_committed: int | None = commit.committed_identifier()
        self.waiting = False
        # the oldest barrier some bucket prepared and the buckets it still waits for
        self.waiting_for: tuple[int, list[int]] | None = None
        self.stopping = False  # the worker stops: finish the commit under way, no more
        self.recheck_s = recheck_s
        self._clock = clock
        self._recheck_at = 0.0

    def commit_ready(self) -> list[int]:
        """Commit every complete barrier in order; returns the barriers committed now."""
        prepared = self.store.barriers()
        if prepared and next_committable(prepared, self.num_buckets, self.last_committed) is None:
            self._recheck_committed()
        for barrier in stale_barriers(prepared, self.last_committed):
            self.store.drop(barrier)
            prepared.pop(barrier, None)
        done: list[int] = []
        while (
            not self.stopping
            and (nxt := next_committable(prepared, self.num_buckets, self.last_committed))
            is not None
        ):
            records = self._read(nxt)
            if records is None:
                break
            self._commit_one(nxt, records)
            prepared.pop(nxt, None)
            done.append(nxt)
        # some buckets prepared a barrier the others (on other workers) have not yet
        self.waiting = bool(prepared)
        oldest = min(prepared, default=None)
        self.waiting_for = (
            None
            if oldest is None
            else (oldest, missing_buckets(prepared, oldest, self.num_buckets))
        )
        return done

    def _recheck_committed(self) -> None:
        """While a barrier waits, look again (at most every ``recheck_s``) whether the
        table has it already.

        A committer starts with the table's last committed barrier, but the previous
        owner of bucket 0 may still be finishing a commit then (its commit outlives the
        rebalance that took the bucket away; on S3 it takes a second). Its barrier N is
        committed, yet this worker's buckets, resumed from the snapshot before N,
        prepare N again while the buckets that stayed with other workers never will:
        without a second look N waited for them for good, and so did every barrier
        after it."""
        now = self._clock()
        if now < self._recheck_at:
            return
        self._recheck_at = now + self.recheck_s
        committed = self._commit.committed_identifier()
        if committed is not None and (
            self.last_committed is None or committed > self.last_committed
        ):
            log.info(
                "table %s: barriers up to %d were committed by another committer",
                self.table,
                committed,
            )
            self.last_committed = committed

    def _read(self, barrier: int) -> list[PreparedRecord] | None:
        """Every bucket's record of ``barrier``; None when one vanished since the listing:
        the bucket's new owner withdrew it to redo it (a rebalance), so the barrier is
        not complete after all. No error: it is waited for like any other bucket."""
        try:
            return [self.store.get(barrier, b) for b in range(self.num_buckets)]
        except FileNotFoundError:
            log.info(
                "table %s: a bucket's record of barrier %d was withdrawn by its new owner; "
                "waiting for it again",
                self.table,
                barrier,
            )
            return None

    def _commit_one(self, barrier: int, records: list[PreparedRecord]) -> None:
        started = time.perf_counter()
        # another committer (previous owner of bucket 0) may have got there first
        already = self._commit.committed_identifier()
        snapshot_id: int | None = None
        if already is None or already < barrier:
            messages = [self._decode(m) for r in records for m in r.messages]
            offsets = {r.bucket: r.next_offset for r in records}
            faults.reach("committing")
            # a truncated barrier replaces the table: its rows are those after the truncate
            truncated = any(r.truncated for r in records)
            kind = CommitKind.OVERWRITE if truncated else CommitKind.APPEND
            snap = self._commit.commit(messages, CommitProperties(barrier, barrier, offsets, kind))
            faults.reach("committed")
            snapshot_id = getattr(snap, "id", None)
        if snapshot_id is None and self._snapshot_id_at is not None:
            snapshot_id = self._snapshot_id_at(barrier)
        seconds = time.perf_counter() - started
        self.store.drop(barrier)
        self.last_committed = max(barrier, already or barrier)
        log.debug("table %s: committed barrier %d in %.3fs", self.table, barrier, seconds)
        if self._on_commit is not None:
            self._on_commit(barrier, seconds, records, snapshot_id)
