"""What follows a commit: compaction, snapshot expiration, rollback.

- `table_commit`: `TableCommit`, the snapshot commit then the housekeeping it triggers
  (as Paimon's `TableCommitImpl` wraps `FileStoreCommit`);
- `compaction`: merging a bucket's sorted runs; `expire`: dropping snapshots and the
  files only they name; `rollback`: an older snapshot (or a tag) made the latest again.

Imports within filestore: commit, errors, format, iceberg, read, state.
"""
