"""CommitProperties: what one commit records beside its files, as one typed value (as
deltalake's ``CommitProperties``), taken by ``TableCommit.commit``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from filestore.format.snapshot import CommitKind


@dataclass(frozen=True)
class CommitProperties:
    """One commit's identity and what its snapshot records.

    ``identifier`` makes retries idempotent: a commit user's identifier is committed at
    most once (``check_identifier=False`` skips that look-up for a writer numbering its
    own commits). ``barrier`` and ``log_offsets`` are the source barrier the snapshot
    completes and the log offsets it covers (the worker's commits). ``kind`` is what the
    commit does; ``OVERWRITE`` replaces ``overwrite_partition`` (None: the whole table).

    Attributes:
        identifier: the commit user's number for this commit; a retry with the same
            number is not committed twice (when ``check_identifier``).
        barrier: the source barrier the snapshot completes; None for a batch write.
            Barriers must strictly increase per table (BarrierOrderError).
        log_offsets: log partition (= bucket) -> next offset to read after the barrier.
        kind: ``APPEND`` (default), ``OVERWRITE`` or ``COMPACT``.
        overwrite_partition: partition column -> value that an ``OVERWRITE`` replaces;
            None replaces the whole table.
        check_identifier: look up whether ``identifier`` was committed already (and
            return that snapshot); False for a writer numbering its own commits.

    Example:
        >>> from filestore import CommitKind, CommitProperties
        >>> worker = CommitProperties(42, barrier=1_700_000_000_000, log_offsets={0: 10})
        >>> overwrite = CommitProperties(
        ...     1, kind=CommitKind.OVERWRITE, overwrite_partition={"day": "2026-11-28"}
        ... )
    """

    identifier: int
    barrier: int | None = None
    log_offsets: Mapping[int, int] | None = None
    kind: CommitKind = CommitKind.APPEND
    overwrite_partition: Mapping[str, str | None] | None = None
    check_identifier: bool = True
