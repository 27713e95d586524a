"""Committing: prepared files become one snapshot, atomically and idempotently.

- `snapshot_commit`: the snapshot producers and the commit itself; `messages`: what a
  writer hands the commit; `properties`: `CommitProperties` (identifier, barrier, user,
  offsets, kind); `lookup`: the exact changelog an APPEND commit stores with itself
  (`changelog-producer=auto`); `_rebase`: sequence numbers rebased so that commit order
  decides which write wins.

Imports within filestore: errors, format, iceberg, read, state, threads.
"""
