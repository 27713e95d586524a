"""The Faust worker: a table's log in, one FileStore snapshot per barrier out, exactly once.

Protocol (see docs/internals.md, "bridge.worker"):

- one consumer group per worker deployment (``--group``); a partition is a bucket;
- on assignment a bucket resumes at the table's latest snapshot ``log_offsets``
  (not at the group's committed offsets) and its uncommitted prepared records
  are discarded, so whatever happened after that snapshot is redone;
- a bucket holds the rows of the open barrier until its marker N arrives, then
  writes them to its own ``TableWrite``, ``prepare()``s and publishes
  ``<table>/_prepared/<N>/bucket-<B>.json`` (commit messages + next offset);
- the worker owning bucket 0 commits snapshot N once every bucket published N,
  in barrier order, as commit user ``dts-worker`` with identifier N, so a
  repeated commit after a crash is a no-op.

Imports within bridge: bridge.errors, bridge.meta, bridge.tables.
"""

from bridge.worker.app import create_app
from bridge.worker.config import WorkerConfig

__all__ = ["WorkerConfig", "create_app"]
