"""The write stall: a bucket at ``num-sorted-run.stop-trigger`` runs is compacted inline.

Readers merge every sorted run of a bucket, so runs must not pile up faster
than compaction folds them. When a flush brings a bucket (committed runs plus
this writer's uncommitted ones) to the stop trigger, the writer blocks: it
merges its own uncommitted runs into one and, if the committed runs alone are
at the limit (auto-compaction off, or losing races), compacts and commits the
bucket before taking more writes. The counters are exported by the worker.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from filestore.errors import FileStoreError
from filestore.format.data_file import DataFileMeta, FileSource
from filestore.format.schema import TableSchema
from filestore.maintenance.compaction import CompactUnit, rewrite
from filestore.maintenance.table_commit import compact
from filestore.state.context import TableContext
from filestore.state.levels import BucketKey, run_counts

# the writer's logger: operators (and docs/internals.md) know stalls by it
log = logging.getLogger("filestore.write.table_write")


class WriteStall:
    """Stalls one writer at the stop trigger; counts stalls and the time they took."""

    def __init__(self, table: TableContext, schema: TableSchema, commit_user: str) -> None:
        self.table = table
        # the writer's schema, pinned when it started (TableContext.schema is the latest)
        self.schema = schema
        self.commit_user = commit_user
        self.stop_trigger = schema.core_options.num_sorted_run_stop_trigger
        self.stall_count = 0
        self.stall_seconds = 0.0
        # committed run counts per bucket, cached until the next snapshot: a flush
        # would otherwise read the whole manifest list once per bucket it wrote
        self._runs_at: tuple[int | None, dict[BucketKey, int]] | None = None

    def _committed_runs(self, key: BucketKey) -> int:
        latest_id = self.table.snapshot_manager.latest_id()
        if self._runs_at is None or self._runs_at[0] != latest_id:
            snap = self.table.snapshot_manager.get(latest_id) if latest_id else None
            self._runs_at = (latest_id, run_counts(self.table, snap))
        return self._runs_at[1].get(key, 0)

    def relieve(self, key: BucketKey, pending: dict[BucketKey, list[DataFileMeta]]) -> None:
        """Stall if bucket ``key`` reached the stop trigger, just after a flush to it.

        ``pending`` is the writer's uncommitted runs by bucket; on a stall the
        bucket's entry is replaced by their merge.
        """
        runs = pending.get(key, [])
        stop = self.stop_trigger
        committed = self._committed_runs(key)
        if committed + len(runs) < stop:
            return
        started = time.monotonic()
        self.stall_count += 1
        log.warning(
            "table %s partition %s bucket %d: %d sorted runs reached "
            "num-sorted-run.stop-trigger %d; writer stalls to compact (stall #%d)",
            self.table.name,
            list(key[0]),
            key[1],
            committed + len(runs),
            stop,
            self.stall_count,
        )
        if len(runs) > 1:
            self._merge_pending(key, pending)
        if committed + 1 >= stop:
            try:
                compact(self.table, f"{self.commit_user}-compact", buckets=[key])
            except FileStoreError as e:  # a concurrent compaction did it: fine
                log.info("table %s: stall compaction skipped: %s", self.table.name, e)
        self.stall_seconds += time.monotonic() - started

    def _merge_pending(self, key: BucketKey, pending: dict[BucketKey, list[DataFileMeta]]) -> None:
        """This writer's uncommitted runs of a bucket rewritten as one; the old files deleted."""
        files = pending[key]
        partition, bucket = key
        merged = rewrite(
            self.table, partition, bucket, CompactUnit(0, tuple(files), drop_deletes=False)
        )
        # still the writer's own level-0 output, not a compaction of committed files;
        # recorded before the old files go, so a failed delete leaves no dangling entry
        pending[key] = [replace(f, file_source=FileSource.APPEND, level=0) for f in merged]
        for f in files:
            self.table.io.delete_file(
                self.table.paths.data_file(
                    self.schema.partition_keys, partition, bucket, f.file_name
                )
            )
