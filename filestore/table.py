"""Table: a cheap handle on one table directory; every call re-reads what it needs.

Nothing here caches snapshots or schemas across calls, so a Table object held
for hours still sees commits and schema changes made by other processes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from filestore.commit import TableCommit
from filestore.errors import SchemaError, SnapshotNotFound, TableNotFound
from filestore.fileio import FileIO
from filestore.manifest import ManifestStore
from filestore.options import CoreOptions
from filestore.paths import TablePaths
from filestore.read import SplitReader
from filestore.scan import Split, TableScan
from filestore.schema import SchemaManager, TableSchema, evolve
from filestore.snapshot import Snapshot, SnapshotManager
from filestore.write import TableWrite

if TYPE_CHECKING:
    from filestore.compaction import CompactResult
    from filestore.expire import ExpireResult, OrphanResult
    from filestore.rollback import RollbackResult


class Table:
    """A FileStore table (primary-key LSM or append-only)."""

    def __init__(self, name: str, io: FileIO, root: str) -> None:
        self.name = name
        self.io = io
        self.paths = TablePaths(root)
        self.schema_manager = SchemaManager(io, self.paths)
        self.snapshot_manager = SnapshotManager(io, self.paths)
        self.manifest_store = ManifestStore(io, self.paths)

    def __repr__(self) -> str:
        return f"Table({self.name!r}, {self.paths.root!r})"

    # -- schema ---------------------------------------------------------
    @property
    def schema(self) -> TableSchema:
        """The latest schema (read from disk)."""
        schema = self.schema_manager.latest()
        if schema is None:
            raise TableNotFound(
                f"table {self.name} does not exist (no schema at {self.paths.root})"
            )
        return schema

    @property
    def options(self) -> CoreOptions:
        return self.schema.core_options

    @property
    def arrow_schema(self) -> pa.Schema:
        return self.schema.arrow_schema

    @property
    def primary_key(self) -> list[str]:
        return list(self.schema.primary_key)

    @property
    def partition_keys(self) -> list[str]:
        return list(self.schema.partition_keys)

    @property
    def bucket_keys(self) -> list[str]:
        """Columns of the bucket hash (also the LogStore's partitioner keys)."""
        return self.schema.bucket_keys

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

    # -- writing --------------------------------------------------------
    def new_write(self, commit_user: str) -> TableWrite:
        return TableWrite(self, commit_user)

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
        import json

        data = self.io.try_read_bytes(self.paths.tag(tag))
        if data is None:
            raise SnapshotNotFound(f"table {self.name} has no tag {tag!r}")
        return Snapshot.from_json(json.loads(data))

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
        reader = SplitReader(self, self.schema, columns, filter)
        batches = reader.read_all(scan.plan())
        return pa.Table.from_batches(batches, schema=reader.output_schema())

    def changes(self, start_snapshot_id: int, end_snapshot_id: int) -> pa.Table:
        """Rows that changed after start up to end, with ``_row_kind`` (+I, -U, +U, -D).

        Replaying them in order onto the state at start gives the state at end
        (see filestore.changes for what ``changelog-producer`` changes).
        """
        from filestore.changes import table_changes

        return table_changes(self, start_snapshot_id, end_snapshot_id)

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
        from filestore.compaction import Compactor

        return Compactor(self, commit_user).compact(
            full=full, partition=partition, progress=progress
        )

    def expire(
        self,
        *,
        retain_min: int | None = None,
        retain_max: int | None = None,
        older_than_ms: int | None = None,
    ) -> ExpireResult:
        """Expire old snapshots (arguments override the snapshot.* retention options)."""
        from filestore.expire import expire_snapshots

        return expire_snapshots(
            self, retain_min=retain_min, retain_max=retain_max, older_than_ms=older_than_ms
        )

    def remove_orphans(
        self, older_than_ms: int = 86_400_000, *, dry_run: bool = False
    ) -> OrphanResult:
        """Delete unreferenced files older than the safety window (default one day)."""
        from filestore.expire import remove_orphans

        return remove_orphans(self, older_than_ms, dry_run=dry_run)

    def create_tag(self, name: str, snapshot_id: int | None = None) -> Snapshot:
        from filestore.tags import create_tag

        return create_tag(self, name, snapshot_id)

    def list_tags(self) -> list[tuple[str, Snapshot]]:
        from filestore.tags import list_tags

        return list_tags(self)

    def delete_tag(self, name: str) -> Snapshot:
        from filestore.tags import delete_tag

        return delete_tag(self, name)

    def rollback_to(
        self, snapshot_id: int | None = None, *, tag: str | None = None
    ) -> RollbackResult:
        """Make a snapshot (or a tag) the latest again; stop writers first."""
        from filestore.rollback import rollback_to

        return rollback_to(self, snapshot_id, tag=tag)
