"""Table: the facade over a table's operations; a cheap handle on one table directory.

``Table`` is a ``TableContext`` (name, IO, paths, schema / snapshot / manifest
managers) plus the verbs: it only delegates to the operation modules below it
(``write``, ``maintenance``, ``scan``, ``read``, ``changes``, ``compaction``,
``expire``, ``tags``, ``rollback``), none of which imports it.

Nothing here caches snapshots across calls, so a Table object held for hours
still sees commits and schema changes made by other processes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from filestore.errors import SchemaError, SnapshotNotFound
from filestore.format.schema import TableSchema, evolve, with_options
from filestore.format.snapshot import Snapshot
from filestore.iceberg import drop_iceberg_metadata, sync_iceberg
from filestore.maintenance.compaction import CompactResult
from filestore.maintenance.expire import (
    ExpireResult,
    OrphanResult,
    delete_tag,
    expire_snapshots,
    remove_orphans,
)
from filestore.maintenance.rollback import RollbackResult, rollback_to
from filestore.maintenance.table_commit import TableCommit, compact
from filestore.read.changes import StoredChange, stored_changelog_files, table_changes
from filestore.read.lookup import rows_of_keys
from filestore.read.scan import Split, TableScan
from filestore.read.split import SplitReader
from filestore.state.context import TableContext
from filestore.state.tags import create_tag, list_tags, tag_snapshot
from filestore.write.table_write import TableWrite


class Table(TableContext):
    """A FileStore table (primary-key LSM or append-only)."""

    def __repr__(self) -> str:
        return f"Table({self.name!r}, {self.paths.root!r})"

    # -- schema ---------------------------------------------------------
    def evolve_schema(self, new_schema: pa.Schema) -> TableSchema:
        """Publish a new schema version (add nullable columns, widen types)."""
        current = self.schema
        nxt = evolve(current, new_schema)
        if not self.schema_manager.commit(nxt):
            raise SchemaError(f"table {self.name}: schema {nxt.id} was changed concurrently; retry")
        return nxt

    def add_column(self, name: str, type: pa.DataType) -> TableSchema:
        return self.evolve_schema(
            self.schema.arrow_schema.append(pa.field(name, type, nullable=True))
        )

    def set_options(
        self, options: Mapping[str, str] | None = None, *, unset: Sequence[str] = ()
    ) -> TableSchema:
        """Change table options (``ALTER TABLE ... SET TBLPROPERTIES``): a new schema
        version, read by every writer's next commit. Options that decide how stored files
        were written (``bucket``, ``merge-engine``, ...) are refused.

        Turning ``metadata.iceberg.storage`` on writes the Iceberg metadata of the
        current snapshot at once; turning it off removes it (else engines would read an
        ever older table).
        """
        current = self.schema
        nxt = with_options(current, options or {}, unset)
        if nxt.options == current.options:
            return current  # nothing changes: no new version (a statement seen twice)
        if not self.schema_manager.commit(nxt):
            raise SchemaError(f"table {self.name}: schema {nxt.id} was changed concurrently; retry")
        was, now = current.core_options.iceberg_storage, nxt.core_options.iceberg_storage
        if now != "disabled" and was == "disabled":
            sync_iceberg(self)
        elif now == "disabled" and was != "disabled":
            drop_iceberg_metadata(self)
        return nxt

    # -- writing --------------------------------------------------------
    def new_write(self, commit_user: str, *, input_changelog: bool = False) -> TableWrite:
        return TableWrite(self, commit_user, input_changelog=input_changelog)

    def new_commit(self, commit_user: str) -> TableCommit:
        return TableCommit(self, commit_user)

    # -- snapshots ------------------------------------------------------
    def snapshots(self) -> list[Snapshot]:
        return self.snapshot_manager.all()

    def latest_snapshot(self) -> Snapshot | None:
        return self.snapshot_manager.latest()

    def snapshot(self, snapshot_id: int) -> Snapshot:
        return self.snapshot_manager.get(snapshot_id)

    def snapshot_at_barrier(self, barrier: int) -> Snapshot | None:
        """Greatest snapshot whose barrier is <= barrier (snapshots without one are skipped)."""
        return self.snapshot_manager.at_barrier(barrier)

    def snapshot_for_barrier(self, barrier: int) -> Snapshot | None:
        """The snapshot committed for exactly ``barrier``: the one its committer wrote (a
        compaction stamped with the same barrier is not it); None if none carries it."""
        return self.snapshot_manager.for_barrier(barrier)

    def snapshot_at_time(self, time_millis: int) -> Snapshot | None:
        """Greatest snapshot committed at or before time_millis (epoch ms)."""
        return self.snapshot_manager.at_time(time_millis)

    def tag_snapshot(self, tag: str) -> Snapshot:
        """The snapshot a tag points at (tags are snapshot JSON files under tag/)."""
        return tag_snapshot(self, tag)

    def resolve_snapshot(
        self,
        snapshot_id: int | None = None,
        *,
        barrier: int | None = None,
        timestamp: int | None = None,
        tag: str | None = None,
    ) -> Snapshot | None:
        """The snapshot a read asks for (latest by default; None for an empty table)."""
        given = [x is not None for x in (snapshot_id, barrier, timestamp, tag)]
        if sum(given) > 1:
            raise ValueError("give at most one of snapshot_id, barrier, timestamp, tag")
        if snapshot_id is not None:
            return self.snapshot(snapshot_id)
        if tag is not None:
            return self.tag_snapshot(tag)
        if barrier is not None:
            snap = self.snapshot_at_barrier(barrier)
            if snap is None:
                raise SnapshotNotFound(
                    f"table {self.name} has no snapshot at or before barrier {barrier}"
                )
            return snap
        if timestamp is not None:
            snap = self.snapshot_at_time(timestamp)
            if snap is None:
                raise SnapshotNotFound(
                    f"table {self.name} has no snapshot at or before time {timestamp}"
                )
            return snap
        return self.latest_snapshot()

    # -- reading --------------------------------------------------------
    def new_scan(
        self,
        snapshot_id: int | None = None,
        filter: pc.Expression | None = None,
        columns: Sequence[str] | None = None,
        *,
        barrier: int | None = None,
        timestamp: int | None = None,
        tag: str | None = None,
        partition: dict[str, Any] | None = None,
        buckets: Sequence[int] | None = None,
    ) -> TableScan:
        snap = self.resolve_snapshot(snapshot_id, barrier=barrier, timestamp=timestamp, tag=tag)
        return TableScan(
            self, snap, filter=filter, columns=columns, partition=partition, buckets=buckets
        )

    def read_split(
        self,
        split: Split,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """The current rows of one split (merged, projected, filtered)."""
        return SplitReader(self, self.schema, columns, filter).read(split)

    def read(
        self,
        snapshot_id: int | None = None,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        *,
        barrier: int | None = None,
        timestamp: int | None = None,
        tag: str | None = None,
        partition: dict[str, Any] | None = None,
    ) -> pa.Table:
        """The table's rows at a snapshot (latest by default) as one Arrow table."""
        scan = self.new_scan(
            snapshot_id,
            filter,
            columns,
            barrier=barrier,
            timestamp=timestamp,
            tag=tag,
            partition=partition,
        )
        return self._read_all(scan, columns, filter)

    def read_bucket(
        self, bucket: int, snapshot_id: int, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """Every current row of one bucket (all partitions) at a snapshot: the state a
        reader of that bucket's log resumes from."""
        return self._read_all(
            self.new_scan(snapshot_id, columns=columns, buckets=[bucket]), columns
        )

    def _read_all(
        self, scan: TableScan, columns: Sequence[str] | None, filter: pc.Expression | None = None
    ) -> pa.Table:
        """Every split the scan plans, read (merged, projected, filtered) into one table."""
        reader = SplitReader(self, self.schema, columns, filter)
        return pa.Table.from_batches(reader.read_all(scan.plan()), schema=reader.output_schema())

    def rows_of_keys(self, keys: pa.Table, bucket: int, snapshot_id: int) -> pa.Table:
        """The current rows of ``keys`` (primary-key columns) in one bucket at a snapshot,
        by point lookups in the files this handle decoded (``filestore.io.file_cache``)."""
        return rows_of_keys(self, self.snapshot(snapshot_id), bucket, keys)

    def changes(self, start_snapshot_id: int, end_snapshot_id: int) -> pa.Table:
        """Rows that changed after start up to end, with ``_row_kind`` (+I, -U, +U, -D).

        Replaying them in order onto the state at start gives the state at end
        (see filestore.read.changes for what ``changelog-producer`` changes).
        """
        return table_changes(self, start_snapshot_id, end_snapshot_id)

    def changelog_files(
        self, start_snapshot_id: int, end_snapshot_id: int
    ) -> list[StoredChange] | None:
        """The stored changelog files of (start, end] in snapshot order, for engines that
        read them themselves; None when the range has no stored changelog to read.
        Start 0 means from before the first snapshot."""
        return stored_changelog_files(self, start_snapshot_id, end_snapshot_id)

    # -- lifecycle ------------------------------------------------------
    def compact(
        self,
        *,
        full: bool = False,
        partition: dict[str, Any] | None = None,
        progress: Callable[[int, int], None] | None = None,
        commit_user: str = "compactor",
    ) -> CompactResult:
        """Compact buckets that need it (all of them into one run with ``full``)."""
        return compact(self, commit_user, full=full, partition=partition, progress=progress)

    def expire(
        self,
        *,
        retain_min: int | None = None,
        retain_max: int | None = None,
        older_than_ms: int | None = None,
    ) -> ExpireResult:
        """Expire old snapshots (arguments override the snapshot.* retention options)."""
        return expire_snapshots(
            self, retain_min=retain_min, retain_max=retain_max, older_than_ms=older_than_ms
        )

    def remove_orphans(
        self, older_than_ms: int = 86_400_000, *, dry_run: bool = False
    ) -> OrphanResult:
        """Delete unreferenced files older than the safety window (default one day)."""
        return remove_orphans(self, older_than_ms, dry_run=dry_run)

    def create_tag(self, name: str, snapshot_id: int | None = None) -> Snapshot:
        """Name a snapshot (kept until the tag is deleted); an Iceberg tag too when the
        table writes Iceberg metadata."""
        snap = create_tag(self, name, snapshot_id)
        sync_iceberg(self)
        return snap

    def list_tags(self) -> list[tuple[str, Snapshot]]:
        return list_tags(self)

    def delete_tag(self, name: str) -> Snapshot:
        """Remove a tag; files only it kept alive (its snapshot expired) are deleted too."""
        snap = delete_tag(self, name)
        sync_iceberg(self)
        return snap

    def rollback_to(
        self, snapshot_id: int | None = None, *, tag: str | None = None
    ) -> RollbackResult:
        """Make a snapshot (or a tag) the latest again; stop writers first."""
        return rollback_to(self, snapshot_id, tag=tag)
