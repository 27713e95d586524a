"""The write path: validate, route rows to partition/bucket memtables, flush sorted runs.

Sequence numbers are assigned here, at write time, one per row, increasing in
the order rows were written. They are hybrid-logical: ``max(last + 1,
wall_clock_ms << 20, table max + 1)``. Within a writer they strictly increase.
Across writers commit order wins, not write time: the committer rebases a
commit whose rows are numbered at or below a committed row of an overlapping
key past the table's greatest sequence number (``filestore.rebase``).
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filestore.bucket import bucket_ids
from filestore.bucket_file import key_value_schema, write_bucket_file
from filestore.compaction import CompactUnit, rewrite
from filestore.context import TableContext
from filestore.data_file import DataFileMeta, FileSource
from filestore.errors import FileStoreError
from filestore.levels import BucketKey, run_counts
from filestore.maintenance import TableCommit, compact
from filestore.merge import check_retractable, integer_keys, merge, take_rows, winner_indices
from filestore.messages import CommitMessage
from filestore.row_kind import (
    DELETE,
    INSERT,
    SEQUENCE_NUMBER,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    VALUE_KIND,
)
from filestore.schema import KEY_PREFIX
from filestore.snapshot import Snapshot
from filestore.validate import conform

_CLOCK_SHIFT = 20
_FEW_GROUPS = 8

log = logging.getLogger(__name__)

PartitionBucket = BucketKey
_Flushed = tuple[DataFileMeta | None, DataFileMeta | None]


class SequenceGenerator:
    """Hybrid-logical sequence numbers (see module doc)."""

    def __init__(self, table_max: int) -> None:
        self._next = table_max + 1

    def take(self, n: int) -> np.ndarray:
        base = max(self._next, int(time.time() * 1000) << _CLOCK_SHIFT)
        self._next = base + n
        return np.arange(base, base + n, dtype=np.int64)

    def advance_past(self, committed_max: int) -> None:
        """Number the next rows above a committed maximum (a rebased commit may have
        moved ours there): later writes then need no rebase against our own."""
        self._next = max(self._next, committed_max + 1)


def partition_strings(table: pa.Table, partition_keys: list[str]) -> list[pa.Array]:
    """Partition values as strings (the text of the directory name; null stays null)."""
    out = []
    for k in partition_keys:
        col = table.column(k)
        out.append(pc.cast(col, pa.string()).combine_chunks())
    return out


def split_groups(
    table: pa.Table, partition_keys: list[str], buckets: np.ndarray
) -> list[tuple[PartitionBucket, np.ndarray | None]]:
    """[((partition values, bucket), row indices or None for all rows)], vectorized."""
    n = table.num_rows
    gid = buckets  # widened to int64 by the first partition column
    factor = int(buckets.max()) + 1 if n else 1
    dictionaries: list[pa.Array] = []
    for arr in partition_strings(table, partition_keys):
        enc = pc.dictionary_encode(arr, null_encoding="encode")
        idx = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        gid = gid + idx * factor
        factor *= len(enc.dictionary)
        dictionaries.append(enc.dictionary)
    if n == 0:
        return []

    def key_of(g: int) -> PartitionBucket:
        bucket = g % (int(buckets.max()) + 1)
        rest = g // (int(buckets.max()) + 1)
        values: list[str | None] = []
        for d in dictionaries:
            values.append(d[rest % len(d)].as_py())
            rest //= len(d)
        return (tuple(values), int(bucket))

    first = int(gid[0])
    if (gid == first).all():
        return [(key_of(first), None)]
    present = np.flatnonzero(np.bincount(gid)) if gid.max() < 4 * n else None
    if present is not None and len(present) <= _FEW_GROUPS:
        # a few groups: one comparison pass each beats sorting the ids
        return [(key_of(int(g)), np.flatnonzero(gid == g)) for g in present]
    # stable (rows keep their sequence order); 16-bit ids take numpy's O(n) radix sort
    small = int(gid.max()) < np.iinfo(np.int16).max
    order = np.argsort(gid.astype(np.int16) if small else gid, kind="stable")
    sorted_gid = gid[order]
    cuts = np.flatnonzero(np.diff(sorted_gid)) + 1
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [n]])
    return [(key_of(int(sorted_gid[s])), order[s:e]) for s, e in zip(starts, ends, strict=True)]


def _contiguous(table: pa.Table) -> pa.Table:
    """The memtable as one chunk per column, so each bucket's take reads only its rows.

    (A take from a chunked table concatenates the chunks first, once per bucket.)
    Left chunked if a column would overflow 32-bit offsets.
    """
    if all(col.num_chunks <= 1 for col in table.columns):
        return table
    try:
        return table.combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowCapacityError):
        return table


def _rows(memtable: pa.Table, idx: np.ndarray) -> pa.Table:
    """Rows ``idx`` (ascending, unique) of the memtable; no copy when that is all of them."""
    return memtable if len(idx) == memtable.num_rows else take_rows(memtable, idx)


class TableWrite:
    """Buffers writes of one table per partition/bucket and turns them into data files."""

    def __init__(self, table: TableContext, commit_user: str) -> None:
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
        self._batches: list[pa.Table] = []
        self._buffered_bytes = 0
        self._pending: dict[PartitionBucket, list[DataFileMeta]] = {}
        self._pending_changelog: dict[PartitionBucket, list[DataFileMeta]] = {}
        self._closed = False
        self._next_identifier: int | None = None
        # write stall (num-sorted-run.stop-trigger): visible to the worker's metrics
        self.stall_count = 0
        self.stall_seconds = 0.0
        self._runs_at: tuple[int | None, dict[PartitionBucket, int]] | None = None

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

    def write(self, data: pa.Table | pa.RecordBatch) -> None:
        """Buffer rows (optional ``_row_kind``: +I, -U, +U, -D; default upsert)."""
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
        seqs = self._seq.take(n)
        if self.primary_key:
            key_cols = [rows.column(k) for k in self.primary_key]
            arrays = [*key_cols, pa.array(seqs), kinds, *rows.columns]
            assert self.kv_schema is not None
            rows = pa.Table.from_arrays(arrays, schema=self.kv_schema)
        else:
            rows = rows.append_column(SEQUENCE_NUMBER, pa.array(seqs))
        self._batches.append(rows)
        self._buffered_bytes += rows.nbytes
        if self._buffered_bytes >= self.options.write_buffer_size:
            self.flush()

    def _groups(self, rows: pa.Table) -> list[tuple[PartitionBucket, np.ndarray | None]]:
        buckets = bucket_ids(rows, self.schema.bucket_keys, self.options.num_buckets)
        return split_groups(rows, self.schema.partition_keys, buckets)

    def flush(self) -> None:
        """Write every buffered partition/bucket as a level-0 sorted run (not yet visible).

        Work runs in parallel threads: hashing rows to buckets (numpy), then per
        bucket sorting, gathering, Parquet encoding and compression, which all
        release the GIL.
        """
        batches = self._batches
        if not batches:
            return
        workers = os.cpu_count() or 1
        with ThreadPoolExecutor(workers, thread_name_prefix="filestore-flush") as pool:
            # copying the memtable into one chunk runs beside the hashing
            contiguous = pool.submit(lambda: _contiguous(pa.concat_tables(batches)))
            groups = pool.map(self._groups, batches)
            offsets = np.cumsum([0, *(b.num_rows for b in batches)])
            parts: dict[PartitionBucket, list[np.ndarray]] = {}
            for start, batch, batch_groups in zip(offsets[:-1], batches, groups, strict=True):
                for key, idx in batch_groups:
                    rows = np.arange(batch.num_rows) if idx is None else idx
                    parts.setdefault(key, []).append(start + rows)
            buffers = [(key, np.concatenate(idx)) for key, idx in parts.items()]
            memtable = contiguous.result()
            results = list(pool.map(lambda kv: self._flush_bucket(kv[0], memtable, kv[1]), buffers))
        # cleared only once every file is written: a failed flush can be retried
        self._batches = []
        self._buffered_bytes = 0
        for (key, _), (meta, changelog) in zip(buffers, results, strict=True):
            if changelog is not None:
                self._pending_changelog.setdefault(key, []).append(changelog)
            if meta is not None:
                self._pending.setdefault(key, []).append(meta)
                self._stall_if_needed(key)

    def _flush_bucket(self, key: PartitionBucket, memtable: pa.Table, idx: np.ndarray) -> _Flushed:
        """(data file, changelog file) of one partition/bucket: rows ``idx`` of the memtable.

        ``idx`` is ascending, so the rows are in the order they were written.
        """
        changelog = None
        if self.options.changelog_producer == "input":
            changelog = self._write_changelog(key, _rows(memtable, idx))
        return self._write_file(key, memtable, idx), changelog

    def _write_changelog(self, key: PartitionBucket, data: pa.Table) -> DataFileMeta:
        """changelog-producer=input: the rows as written, before merging, in sequence order."""
        partition, bucket = key
        meta = write_bucket_file(
            self.table,
            self.schema,
            partition,
            bucket,
            data,
            level=0,
            file_source=FileSource.APPEND,
            prefix="changelog",
        )
        return meta

    def _committed_runs(self, key: PartitionBucket) -> int:
        latest_id = self.table.snapshot_manager.latest_id()
        if self._runs_at is None or self._runs_at[0] != latest_id:
            snap = self.table.snapshot_manager.get(latest_id) if latest_id else None
            self._runs_at = (latest_id, run_counts(self.table, snap))
        return self._runs_at[1].get(key, 0)

    def _stall_if_needed(self, key: PartitionBucket) -> None:
        """At num-sorted-run.stop-trigger runs, compact inline before taking more writes.

        Uncommitted flushes of this writer are merged into one run; if the committed
        runs alone are at the limit (auto-compaction off or losing races), the bucket
        is compacted and committed here, blocking this writer meanwhile.
        """
        pending = self._pending.get(key, [])
        stop = self.options.num_sorted_run_stop_trigger
        committed = self._committed_runs(key)
        if committed + len(pending) < stop:
            return
        started = time.monotonic()
        self.stall_count += 1
        log.warning(
            "table %s partition %s bucket %d: %d sorted runs reached "
            "num-sorted-run.stop-trigger %d; writer stalls to compact (stall #%d)",
            self.table.name,
            list(key[0]),
            key[1],
            committed + len(pending),
            stop,
            self.stall_count,
        )
        if len(pending) > 1:
            self._merge_pending(key)
        if committed + 1 >= stop:
            try:
                compact(self.table, f"{self.commit_user}-compact", buckets=[key])
            except FileStoreError as e:  # a concurrent compaction did it: fine
                log.info("table %s: stall compaction skipped: %s", self.table.name, e)
        self.stall_seconds += time.monotonic() - started

    def _merge_pending(self, key: PartitionBucket) -> None:
        files = self._pending[key]
        partition, bucket = key
        merged = rewrite(
            self.table, partition, bucket, CompactUnit(0, tuple(files), drop_deletes=False)
        )
        # still the writer's own level-0 output, not a compaction of committed files
        self._pending[key] = [replace(f, file_source=FileSource.APPEND, level=0) for f in merged]
        for f in files:
            self.table.io.delete_file(
                self.table.paths.data_file(
                    self.schema.partition_keys, partition, bucket, f.file_name
                )
            )

    def _gather(self, memtable: pa.Table, rows: np.ndarray) -> pa.Table:
        """Rows of the memtable; the value copies of the key reuse the gathered keys."""
        copies = [c for c in self.primary_key if c in memtable.column_names]
        data = take_rows(memtable.drop_columns(copies), rows)
        for c in copies:
            i = memtable.schema.get_field_index(c)
            data = data.add_column(i, memtable.schema.field(c), data.column(KEY_PREFIX + c))
        return data

    def _bucket_keys(self, memtable: pa.Table, idx: np.ndarray) -> pa.Table:
        """Key columns (and _VALUE_KIND) of rows ``idx``: what deciding winners needs."""
        keys = integer_keys(memtable, self.key_columns)
        if keys is not None:
            # one integer key: a numpy gather of a single column, no kinds needed
            # (winners keep retractions in a level-0 run)
            return pa.table({self.key_columns[0]: keys[idx]})
        return take_rows(memtable.select([*self.key_columns, VALUE_KIND]), idx)

    def _write_file(
        self, key: PartitionBucket, memtable: pa.Table, idx: np.ndarray
    ) -> DataFileMeta | None:
        partition, bucket = key
        # sequence numbers increase in write order, and idx is in write order
        seq = memtable.column(SEQUENCE_NUMBER)
        min_seq, max_seq = seq[int(idx[0])].as_py(), seq[int(idx[-1])].as_py()
        if self.primary_key and self.options.merge_engine == "deduplicate":
            # winners from the keys alone, then one take of the winning rows in key order
            chosen = winner_indices(
                self._bucket_keys(memtable, idx),
                self.key_columns,
                drop_deletes=False,
                in_order=True,
            )
            data = self._gather(memtable, idx[chosen])
        elif self.primary_key:
            # a memtable is in sequence order: rows were numbered as they arrived
            data = merge(
                _rows(memtable, idx),
                self.key_columns,
                self.options,
                drop_deletes=False,
                in_sequence_order=True,
            )
        else:
            data = _rows(memtable, idx)
        if self.primary_key and data.num_rows == 0:
            return None
        if not self.primary_key:
            data = data.drop_columns([SEQUENCE_NUMBER])
        meta = write_bucket_file(
            self.table,
            self.schema,
            partition,
            bucket,
            data,
            level=0,
            file_source=FileSource.APPEND,
        )
        # the file covers every sequence number of its memtable rows, losers included
        return replace(meta, min_sequence_number=min_seq, max_sequence_number=max_seq)

    # -- committing -----------------------------------------------------
    def prepare(self) -> list[CommitMessage]:
        """Flush and hand over the files written so far (written, not yet visible)."""
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
            snap = committer.commit(
                messages,
                identifier,
                barrier=barrier,
                log_offsets=log_offsets,
                check_identifier=check,
            )
        except BaseException:
            committer.abort(messages)
            raise
        self._next_identifier = identifier + 1
        if snap is not None:
            self._seq.advance_past(snap.max_sequence_number)
        return snap

    def close(self) -> None:
        """Drop buffered rows and delete flushed files that were never prepared."""
        if self._closed:
            return
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
        self._batches.clear()
        self._closed = True

    def __enter__(self) -> TableWrite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
