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
    """

    identifier: int
    barrier: int | None = None
    log_offsets: Mapping[int, int] | None = None
    kind: CommitKind = CommitKind.APPEND
    overwrite_partition: Mapping[str, str | None] | None = None
    check_identifier: bool = True
