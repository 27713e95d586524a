"""The writer's memtable: rows as written, routed to partition/bucket groups at flush.

Rows are buffered unrouted (appending is then one list append) and hashed to
buckets only when flushed, batch by batch in parallel threads, since hashing
and dictionary encoding are numpy/Arrow work that releases the GIL.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filestore.format.bucket import bucket_ids
from filestore.state.levels import BucketKey
from filestore.threads import parallel_map

# at most this many groups in a batch: one comparison pass per group beats sorting
_FEW_GROUPS = 8

Group = tuple[BucketKey, np.ndarray | None]
"""A partition/bucket and its row indices in a batch (None: every row)."""


def partition_strings(table: pa.Table, partition_keys: list[str]) -> list[pa.Array]:
    """Partition values as strings (the text of the directory name; null stays null)."""
    out = []
    for k in partition_keys:
        col = table.column(k)
        out.append(pc.cast(col, pa.string()).combine_chunks())
    return out


def split_groups(table: pa.Table, partition_keys: list[str], buckets: np.ndarray) -> list[Group]:
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

    def key_of(g: int) -> BucketKey:
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


class Memtable:
    """Key-value rows as written, in sequence order, with their size in bytes."""

    def __init__(self, partition_keys: list[str], bucket_keys: list[str], num_buckets: int) -> None:
        self._partition_keys = partition_keys
        self._bucket_keys = bucket_keys
        self._num_buckets = num_buckets
        self._batches: list[pa.Table] = []
        self.nbytes = 0

    def __bool__(self) -> bool:
        return bool(self._batches)

    def append(self, rows: pa.Table) -> None:
        self._batches.append(rows)
        self.nbytes += rows.nbytes

    def clear(self) -> None:
        self._batches = []
        self.nbytes = 0

    def _groups(self, rows: pa.Table) -> list[Group]:
        buckets = bucket_ids(rows, self._bucket_keys, self._num_buckets)
        return split_groups(rows, self._partition_keys, buckets)

    def route(self) -> tuple[pa.Table, list[tuple[BucketKey, np.ndarray]]]:
        """(all rows as one table, [(partition/bucket, ascending row indices into it)]).

        Indices ascend, so each bucket's rows stay in the order they were written.
        Not cleared here: the caller clears once every file is written, so that a
        failed flush can be retried.
        """
        batches = self._batches
        # copying the memtable into one chunk runs beside the hashing
        tasks: list[Callable[[], object]] = [lambda: _contiguous(pa.concat_tables(batches))]
        tasks += [partial(self._groups, b) for b in batches]
        copied, *grouped = parallel_map(lambda task: task(), tasks)
        contiguous, groups = cast(pa.Table, copied), cast("list[list[Group]]", grouped)
        offsets = np.cumsum([0, *(b.num_rows for b in batches)])
        parts: dict[BucketKey, list[np.ndarray]] = {}
        for start, batch, batch_groups in zip(offsets[:-1], batches, groups, strict=True):
            for key, idx in batch_groups:
                rows = np.arange(batch.num_rows) if idx is None else idx
                parts.setdefault(key, []).append(start + rows)
        buffers = [(key, np.concatenate(idx)) for key, idx in parts.items()]
        return contiguous, buffers
