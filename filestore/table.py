"""Table: the facade over a table's operations; a cheap handle on one table directory.

``Table`` is a ``TableContext`` (name, IO, paths, schema / snapshot / manifest
managers) plus the verbs: it only delegates to the operation modules below it
(``write``, ``maintenance``, ``scan``, ``read``, ``changes``, ``compaction``,
``expire``, ``tags``, ``rollback``), none of which imports it. Its verbs about
time (snapshots, tags, rollback) live in its base class
``filestore.table_history.TableHistory``.

Nothing here caches snapshots across calls, so a Table object held for hours
still sees commits and schema changes made by other processes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from filestore.errors import SchemaError
from filestore.format.schema import TableSchema, evolve, with_options
from filestore.iceberg import drop_iceberg_metadata, sync_iceberg
from filestore.maintenance.compaction import CompactResult
from filestore.maintenance.expire import (
    ExpireResult,
    OrphanResult,
    expire_snapshots,
    remove_orphans,
)
from filestore.maintenance.table_commit import TableCommit, compact
from filestore.read.changes import StoredChange, stored_changelog_files, table_changes
from filestore.read.lookup import rows_of_keys
from filestore.read.scan import Split, TableScan
from filestore.read.split import SplitReader
from filestore.table_history import TableHistory
from filestore.write.table_write import TableWrite


class Table(TableHistory):
    """A FileStore table (primary-key LSM or append-only).

    Get one from ``Catalog.create_table`` or ``Catalog.get_table``; the snapshot,
    tag and rollback methods come from ``TableHistory``.

    Example:
        >>> import pyarrow as pa
        >>> from filestore import Catalog
        >>> table = Catalog("/tmp/warehouse").create_table(
        ...     "db.users",
        ...     pa.schema([("id", pa.int64()), ("name", pa.string())]),
        ...     primary_key=["id"],
        ... )
        >>> with table.new_write("loader") as write:
        ...     write.write(pa.table({"id": [1, 2], "name": ["a", "b"]}))
        ...     snap = write.commit()
        >>> table.read(columns=["name"]).num_rows
        2
    """

    def __repr__(self) -> str:
        return f"Table({self.name!r}, {self.paths.root!r})"

    # -- schema ---------------------------------------------------------
    def evolve_schema(self, new_schema: pa.Schema) -> TableSchema:
        """Publish a new schema version (add nullable columns, widen types).

        Args:
            new_schema: the whole new Arrow schema: every current column (same or
                losslessly wider type) plus new nullable ones, which go at the end.

        Returns:
            The new schema version (its ``id`` one above the current one).

        Raises:
            SchemaError: the change is not allowed, or another process published a
                version at the same time (retry).
        """
        current = self.schema
        nxt = evolve(current, new_schema)
        if not self.schema_manager.commit(nxt):
            raise SchemaError(f"table {self.name}: schema {nxt.id} was changed concurrently; retry")
        return nxt

    def add_column(self, name: str, type: pa.DataType) -> TableSchema:
        """Add a nullable column at the end (``evolve_schema`` with one more field).

        Args:
            name: the new column's name.
            type: its Arrow type.

        Returns:
            The new schema version.

        Raises:
            SchemaError: the name is taken or reserved, or a concurrent change won.
        """
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

        Args:
            options: option keys and values to set (``CoreOptions`` lists the keys).
            unset: option keys to remove (back to their defaults).

        Returns:
            The new schema version; the current one when nothing changes.

        Raises:
            InvalidOption: an unknown key or a bad value.
            SchemaError: an option fixed at creation, a key both set and unset, or a
                concurrent change won (retry).
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
        """A writer of this table (close it, or use it as a context manager).

        Args:
            commit_user: who commits; commit identifiers are counted per commit user.
            input_changelog: the rows written are a full changelog (see ``TableWrite``).

        Returns:
            A new ``TableWrite``.
        """
        return TableWrite(self, commit_user, input_changelog=input_changelog)

    def new_commit(self, commit_user: str) -> TableCommit:
        """A committer of messages prepared elsewhere (``TableWrite.prepare``).

        Args:
            commit_user: who commits; commits are idempotent per (user, identifier).

        Returns:
            A new ``TableCommit``.
        """
        return TableCommit(self, commit_user)

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
        """A scan planning the splits of one snapshot (latest by default).

        Give at most one of ``snapshot_id``, ``barrier``, ``timestamp`` and ``tag``.

        Args:
            snapshot_id: read this snapshot.
            filter: a row filter; files whose statistics rule it out are skipped (rows
                are filtered by ``read_split``).
            columns: the columns to read; None reads all.
            barrier: read the greatest snapshot at or before this source barrier.
            timestamp: read the greatest snapshot committed at or before this epoch ms.
            tag: read the snapshot of this tag.
            partition: partition column -> value; only that partition is read.
            buckets: only these bucket numbers are read.

        Returns:
            The scan (its ``plan()`` gives the splits).

        Raises:
            SnapshotNotFound: no snapshot matches.
            ValueError: more than one of the snapshot selectors was given.
        """
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
        """The current rows of one split (merged, projected, filtered).

        Args:
            split: a split of ``new_scan(...).plan()`` (possibly planned in another process).
            columns: the columns to return; None returns all.
            filter: rows not matching it are dropped.

        Returns:
            An iterator of record batches.
        """
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
        """The table's rows at a snapshot (latest by default) as one Arrow table.

        Give at most one of ``snapshot_id``, ``barrier``, ``timestamp`` and ``tag``.

        Args:
            snapshot_id: read this snapshot.
            columns: the columns to return; None returns all.
            filter: rows not matching it are dropped.
            barrier: read the greatest snapshot at or before this source barrier.
            timestamp: read the greatest snapshot committed at or before this epoch ms.
            tag: read the snapshot of this tag.
            partition: partition column -> value; only that partition is read.

        Returns:
            The rows (empty, with the table's columns, for an empty table).

        Raises:
            SnapshotNotFound: no snapshot matches.
            SchemaError: ``filter`` or ``partition`` names what the table does not have.
            ValueError: more than one of the snapshot selectors was given.
        """
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
        reader of that bucket's log resumes from.

        Args:
            bucket: the bucket number (0 to ``num_buckets - 1``).
            snapshot_id: the snapshot to read.
            columns: the columns to return; None returns all.

        Returns:
            The bucket's rows.

        Raises:
            SnapshotNotFound: the snapshot expired or never existed.
        """
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
        by point lookups in the files this handle decoded (``filestore.io.file_cache``).

        Args:
            keys: the primary-key columns of the rows wanted.
            bucket: the bucket those keys hash to.
            snapshot_id: the snapshot to look in.

        Returns:
            The current rows of the keys found (keys without a row are left out).

        Raises:
            FileStoreError: the table has no primary key.
            SnapshotNotFound: the snapshot expired or never existed.
        """
        return rows_of_keys(self, self.snapshot(snapshot_id), bucket, keys)

    def changes(self, start_snapshot_id: int, end_snapshot_id: int) -> pa.Table:
        """Rows that changed after start up to end, with ``_row_kind`` (+I, -U, +U, -D).

        Replaying them in order onto the state at start gives the state at end
        (see filestore.read.changes for what ``changelog-producer`` changes).

        Args:
            start_snapshot_id: the snapshot the changes start after (exclusive).
            end_snapshot_id: the snapshot they end at (inclusive).

        Returns:
            The changed rows with a ``_row_kind`` column; empty when start equals end.

        Raises:
            SnapshotNotFound: either snapshot expired or never existed.
            ValueError: end is before start.
        """
        return table_changes(self, start_snapshot_id, end_snapshot_id)

    def changelog_files(
        self, start_snapshot_id: int, end_snapshot_id: int
    ) -> list[StoredChange] | None:
        """The stored changelog files of (start, end] in snapshot order, for engines that
        read them themselves; None when the range has no stored changelog to read.
        Start 0 means from before the first snapshot.

        Args:
            start_snapshot_id: the snapshot the range starts after (exclusive), or 0.
            end_snapshot_id: the snapshot it ends at (inclusive).

        Returns:
            The files with the snapshot id and barrier of each, or None (then read
            ``changes``, which diffs snapshots instead).
        """
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
        """Compact buckets that need it (all of them into one run with ``full``).

        Args:
            full: rewrite every bucket into one sorted run, needed or not.
            partition: partition column -> value; only that partition is compacted.
            progress: called with (buckets done, buckets to do) as it goes.
            commit_user: the commit user of the COMPACT snapshot.

        Returns:
            What was compacted: the snapshot (None if nothing needed it), the bucket
            count and the files and rows before and after.

        Raises:
            CommitConflict: a concurrent commit removed files being compacted (redo it).
        """
        return compact(self, commit_user, full=full, partition=partition, progress=progress)

    def expire(
        self,
        *,
        retain_min: int | None = None,
        retain_max: int | None = None,
        older_than_ms: int | None = None,
    ) -> ExpireResult:
        """Expire old snapshots (arguments override the snapshot.* retention options).

        Args:
            retain_min: keep at least this many snapshots (``snapshot.num-retained.min``).
            retain_max: keep at most this many (``snapshot.num-retained.max``).
            older_than_ms: expire snapshots older than this many milliseconds, within
                the two bounds (``snapshot.time-retained``).

        Returns:
            The expired snapshot ids, the data, changelog and manifest files deleted,
            and the earliest snapshot left.

        Raises:
            InvalidOption: ``retain_min`` < 1 or ``retain_max`` < ``retain_min``.
        """
        return expire_snapshots(
            self, retain_min=retain_min, retain_max=retain_max, older_than_ms=older_than_ms
        )

    def remove_orphans(
        self, older_than_ms: int = 86_400_000, *, dry_run: bool = False
    ) -> OrphanResult:
        """Delete unreferenced files older than the safety window (default one day).

        Args:
            older_than_ms: only files last modified more than this many milliseconds ago
                are deleted (younger ones may belong to a commit in progress).
            dry_run: list what would be deleted, delete nothing.

        Returns:
            The paths deleted (or that would be), how many young orphans were kept, and
            the bytes freed.
        """
        return remove_orphans(self, older_than_ms, dry_run=dry_run)
