"""The write path: validate and number rows, buffer them, flush level-0 runs, commit.

Sequence numbers are assigned here, at write time, one per row, increasing in
the order rows were written. They are hybrid-logical: ``max(last + 1,
wall_clock_ms << 20, table max + 1)``. Within a writer they strictly increase.
Across writers commit order wins, not write time: the committer rebases a
commit whose rows are numbered at or below a committed row of an overlapping
key past the table's greatest sequence number (``filestore.commit._rebase``).
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from filestore.commit.messages import CommitMessage
from filestore.commit.properties import CommitProperties
from filestore.errors import FileStoreError
from filestore.format.data_file import DataFileMeta
from filestore.format.row_kind import DELETE, INSERT, SEQUENCE_NUMBER, UPDATE_AFTER, UPDATE_BEFORE
from filestore.format.schema import KEY_PREFIX
from filestore.format.snapshot import Snapshot
from filestore.maintenance.table_commit import TableCommit
from filestore.read.merge import check_retractable
from filestore.state.bucket_file import key_value_schema
from filestore.state.context import TableContext
from filestore.state.levels import BucketKey
from filestore.threads import parallel_map
from filestore.write._file_writer import LevelZeroWriter
from filestore.write._memtable import Memtable, partition_strings, split_groups
from filestore.write._stall import WriteStall
from filestore.write._validate import conform

__all__ = [
    "PartitionBucket",
    "SequenceGenerator",
    "TableWrite",
    "partition_strings",
    "split_groups",
]

_CLOCK_SHIFT = 20

PartitionBucket = BucketKey


class SequenceGenerator:
    """Hybrid-logical sequence numbers (see module doc)."""

    def __init__(self, table_max: int) -> None:
        self._next = table_max + 1

    def take(self, n: int) -> np.ndarray:
        base = max(self._next, int(time.time() * 1000) << _CLOCK_SHIFT)
        self._next = base + n
        return np.arange(base, base + n, dtype=np.int64)

    def claim(self, seqs: np.ndarray) -> np.ndarray:
        """Numbers a caller chose (e.g. ordered by source barrier across a write's tasks):
        they must increase, from above every number this writer gave out."""
        if len(seqs) and (int(seqs[0]) < self._next or bool((np.diff(seqs) <= 0).any())):
            raise FileStoreError(
                f"sequence numbers must increase from {self._next} on, got "
                f"{int(seqs[0])}..{int(seqs[-1])} (not strictly increasing, or below the "
                "numbers this writer already gave out)"
            )
        if len(seqs):
            self._next = int(seqs[-1]) + 1
        return np.asarray(seqs, dtype=np.int64)

    def advance_past(self, committed_max: int) -> None:
        """Number the next rows above a committed maximum (a rebased commit may have
        moved ours there): later writes then need no rebase against our own."""
        self._next = max(self._next, committed_max + 1)


class TableWrite:
    """Buffers writes of one table and turns them into data files, then commits them.

    Composes the memtable (``filestore.write._memtable``), the level-0 file writer
    (``filestore.write._file_writer``) and the write stall (``filestore.write._stall``);
    owns the sequence numbers, the files flushed but not yet prepared, and commit
    identifiers.

    Args:
        table: the table (``Table.new_write`` passes itself); its schema is read once,
            so a writer keeps writing the version it started with.
        commit_user: who commits: identifiers are counted per commit user.
        input_changelog: the rows written are a full changelog (every update as -U
            then +U, every delete with its row), as a normalized upsert log is; with
            ``changelog-producer=auto`` they are then stored as the changelog as written.

    Example:
        >>> import pyarrow as pa
        >>> with table.new_write("loader") as write:
        ...     write.write(pa.table({"id": [1, 2], "name": ["a", "b"]}))
        ...     write.write(pa.table({"id": [2], "name": ["b"], "_row_kind": ["-D"]}))
        ...     snap = write.commit()
        >>> table.read().num_rows
        1
    """

    def __init__(
        self, table: TableContext, commit_user: str, *, input_changelog: bool = False
    ) -> None:
        self.table = table
        self.commit_user = commit_user
        self.schema = table.schema
        self.options = self.schema.core_options
        self.primary_key = list(self.schema.primary_key)
        self.key_columns = [KEY_PREFIX + k for k in self.primary_key]
        self.kv_schema = key_value_schema(self.schema) if self.primary_key else None
        latest = table.snapshot_manager.latest()
        self._seq = SequenceGenerator(latest.max_sequence_number if latest else -1)
        # the memtable: key-value rows as written; routed to buckets at flush
        self._memtable = Memtable(
            self.schema.partition_keys, self.schema.bucket_keys, self.options.num_buckets
        )
        self._files = LevelZeroWriter(table, self.schema, input_changelog=input_changelog)
        self._stall = WriteStall(table, self.schema, commit_user)
        self._pending: dict[PartitionBucket, list[DataFileMeta]] = {}
        self._pending_changelog: dict[PartitionBucket, list[DataFileMeta]] = {}
        self._closed = False
        self._next_identifier: int | None = None

    # write stall (num-sorted-run.stop-trigger): visible to the worker's metrics
    @property
    def stall_count(self) -> int:
        """How many times writes stalled waiting for a compaction."""
        return self._stall.stall_count

    @property
    def stall_seconds(self) -> float:
        """Seconds spent stalled in total."""
        return self._stall.stall_seconds

    # -- writing ---------------------------------------------------------
    def _check_retractions(self, kinds: pa.Array | pa.ChunkedArray) -> None:
        """Aggregation: refuse -U (and -D that retracts) for value columns whose
        function cannot retract, before anything is buffered."""
        kinds_np = np.asarray(kinds.to_numpy(zero_copy_only=False))
        retract = kinds_np == UPDATE_BEFORE
        if not self.options.aggregation_remove_record_on_delete:
            retract |= kinds_np == DELETE
        if not retract.any():
            return
        fixed = {*self.primary_key, *self.schema.partition_keys}
        values = [c for c in self.schema.column_names if c not in fixed]
        check_retractable(self.table.name, values, self.options)

    def write(
        self, data: pa.Table | pa.RecordBatch, sequence_numbers: np.ndarray | None = None
    ) -> None:
        """Buffer rows (optional ``_row_kind``: +I, -U, +U, -D; default upsert).

        ``sequence_numbers``: one per row, increasing, instead of the writer's clock (see
        ``SequenceGenerator.claim``); a key's row with the greatest number wins.

        Args:
            data: rows with the table's columns (missing nullable columns are null;
                ``_row_kind`` optional).
            sequence_numbers: int64 numbers, one per row, strictly increasing and above
                every number this writer gave out; None numbers rows by the clock.

        Raises:
            SchemaError: the data does not fit the table's schema (wrong type, null
                key, unknown column, ...).
            RetractionNotSupported: an aggregation table got -U/-D rows for a column
                whose function cannot retract.
            FileStoreError: the writer is closed, an append-only table got -U/-D rows,
                or the sequence numbers are wrong.
        """
        if self._closed:
            raise FileStoreError("this TableWrite is closed")
        rows, kinds = conform(data, self.schema, self.table.name)
        n = rows.num_rows
        if n == 0:
            return
        if not self.primary_key:
            kinds_np = np.asarray(kinds.to_numpy(zero_copy_only=False))
            if not ((kinds_np == INSERT) | (kinds_np == UPDATE_AFTER)).all():
                raise FileStoreError(
                    f"table {self.table.name} has no primary key: rows can only be appended "
                    "(_row_kind +I/+U), not retracted"
                )
        if self.primary_key and self.options.merge_engine == "aggregation":
            self._check_retractions(kinds)
        if sequence_numbers is None:
            seqs = self._seq.take(n)
        elif len(sequence_numbers) != n:
            raise FileStoreError(f"{len(sequence_numbers)} sequence numbers for {n} rows")
        else:
            seqs = self._seq.claim(sequence_numbers)
        if self.primary_key:
            key_cols = [rows.column(k) for k in self.primary_key]
            arrays = [*key_cols, pa.array(seqs), kinds, *rows.columns]
            assert self.kv_schema is not None
            rows = pa.Table.from_arrays(arrays, schema=self.kv_schema)
        else:
            rows = rows.append_column(SEQUENCE_NUMBER, pa.array(seqs))
        self._memtable.append(rows)
        if self._memtable.nbytes >= self.options.write_buffer_size:
            self.flush()

    def flush(self) -> None:
        """Write every buffered partition/bucket as a level-0 sorted run (not yet visible).

        Work runs in parallel threads: hashing rows to buckets (numpy), then per
        bucket sorting, gathering, Parquet encoding and compression, which all
        release the GIL.
        """
        if not self._memtable:
            return
        memtable, buffers = self._memtable.route()
        results = parallel_map(lambda kv: self._files.flush_bucket(kv[0], memtable, kv[1]), buffers)
        # cleared only once every file is written: a failed flush can be retried
        self._memtable.clear()
        for (key, _), (meta, changelog) in zip(buffers, results, strict=True):
            if changelog is not None:
                self._pending_changelog.setdefault(key, []).append(changelog)
            if meta is not None:
                self._pending.setdefault(key, []).append(meta)
                self._stall.relieve(key, self._pending)

    # -- committing -----------------------------------------------------
    def prepare(self) -> list[CommitMessage]:
        """Flush and hand over the files written so far (written, not yet visible).

        Returns:
            One message per partition/bucket written since the last prepare, for
            ``TableCommit.commit`` (possibly in another process: ``to_json``).
        """
        self.flush()
        messages = [
            CommitMessage(
                partition=part,
                bucket=bucket,
                total_buckets=self.options.num_buckets,
                new_files=tuple(self._pending.get((part, bucket), ())),
                changelog_files=tuple(self._pending_changelog.get((part, bucket), ())),
            )
            for (part, bucket) in {**self._pending, **self._pending_changelog}
        ]
        self._pending.clear()
        self._pending_changelog.clear()
        return messages

    def commit(
        self,
        barrier: int | None = None,
        log_offsets: dict[int, int] | None = None,
        identifier: int | None = None,
    ) -> Snapshot | None:
        """prepare() + commit; returns the new snapshot (or the latest if nothing changed).

        With ``identifier=None`` the writer numbers its commits itself (greatest
        identifier of this commit user + 1); pass explicit identifiers to make
        retries idempotent.

        On an error the prepared files are deleted (``TableCommit.abort``).

        Args:
            barrier: the source barrier the snapshot completes (strictly increasing per
                table); None for a batch write.
            log_offsets: log partition (= bucket) -> next offset to read after the barrier.
            identifier: this commit's number for the commit user; None counts on from
                the greatest committed one.

        Returns:
            The new snapshot, the existing one if ``identifier`` was committed already,
            or the latest (None for an empty table) when there was nothing to commit.

        Raises:
            CommitConflict: concurrent commits kept winning, or removed files it deletes.
            BarrierOrderError: ``barrier`` is not above the table's latest barrier.
        """
        messages = self.prepare()
        committer = TableCommit(self.table, self.commit_user)
        if identifier is None:
            if self._next_identifier is None:
                self._next_identifier = (committer.committed_identifier() or 0) + 1
            identifier = self._next_identifier
            check = False
        else:
            check = True
        try:
            properties = CommitProperties(identifier, barrier, log_offsets, check_identifier=check)
            snap = committer.commit(messages, properties)
        except BaseException:
            committer.abort(messages)
            raise
        self._next_identifier = identifier + 1
        if snap is not None:
            self._seq.advance_past(snap.max_sequence_number)
        return snap

    def discard(self) -> None:
        """Drop the rows written since the last prepare() (flushed files are deleted);
        the writer stays usable."""
        pending = [*self._pending.items(), *self._pending_changelog.items()]
        for (part, bucket), files in pending:
            for f in files:
                self.table.io.delete_file(
                    self.table.paths.data_file(
                        self.schema.partition_keys, part, bucket, f.file_name
                    )
                )
        self._pending.clear()
        self._pending_changelog.clear()
        self._memtable.clear()

    def close(self) -> None:
        """Drop buffered rows and delete flushed files that were never prepared."""
        if self._closed:
            return
        self.discard()
        self._closed = True

    def __enter__(self) -> TableWrite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
