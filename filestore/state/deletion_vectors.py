"""Deletion vectors: the row positions of a data file that are no longer current.

With ``deletion-vectors.enabled`` (primary-key tables, ``merge-engine=deduplicate``), a
commit that supersedes rows of older files records their positions instead of leaving
the readers to merge (merge-on-write, as Paimon's and Delta's deletion vectors). Every
key then has at most one live row in its bucket, so a read is each file minus its
deleted positions: no merge, and Spark's own Parquet reader can do it
(``_metadata.row_index``).

A file's vector is a Roaring bitmap in the portable serialization (the format Java's
RoaringBitmap reads), stored *inline* in the file's manifest entry
(``DataFileMeta.deletion_vector``): a commit that deletes rows of a file re-adds its
entry with the grown vector (DELETE + ADD of the same file in one delta manifest).
Inline, as Delta does for small vectors, a vector is committed exactly when its
snapshot is, needs no file of its own (nothing to clean up after a crash, nothing for
expiration to track) and reaches a scan planner with the manifest it already reads.
The cost is manifest size: ~2 bytes per deleted row at worst, far less for runs.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from filestore.format.data_file import DataFileMeta
from filestore.state.bucket_file import read_bucket_file
from filestore.state.context import Partition, TableContext


def deleted_positions(meta: DataFileMeta) -> np.ndarray:
    """The deleted row positions of a data file, sorted (empty when it has no vector)."""
    if not meta.deletion_vector:
        return np.empty(0, dtype=np.uint32)
    bitmap = BitMap.deserialize(meta.deletion_vector)
    return np.frombuffer(bitmap.to_array(), dtype=np.uint32)


def added_positions(old: bytes, new: bytes) -> np.ndarray | None:
    """The positions vector ``new`` holds beyond ``old`` (sorted, int64; vectors as
    ``DataFileMeta.deletion_vector``), or None when ``new`` lacks some of ``old``'s."""
    before = BitMap.deserialize(old) if old else BitMap()
    after = BitMap.deserialize(new) if new else BitMap()
    if not before <= after:
        return None
    return np.frombuffer((after - before).to_array(), dtype=np.uint32).astype(np.int64)


def deleted_count(meta: DataFileMeta) -> int:
    return len(BitMap.deserialize(meta.deletion_vector)) if meta.deletion_vector else 0


def with_deleted(meta: DataFileMeta, positions: np.ndarray) -> DataFileMeta:
    """``meta`` whose vector also holds ``positions`` (row numbers within the file)."""
    if len(positions) == 0:
        return meta
    # an array.array is read as one buffer; a numpy array element by element (10x slower)
    grown = BitMap(array("I", np.asarray(positions, dtype=np.uint32).tobytes()))
    if meta.deletion_vector:
        grown |= BitMap.deserialize(meta.deletion_vector)
    return replace(meta, deletion_vector=grown.serialize())


def live_mask(meta: DataFileMeta, positions: np.ndarray | None, num_rows: int) -> np.ndarray | None:
    """Which of the rows read are live: ``positions`` are the rows' numbers in the file
    (None: all rows, in order). None when every row read is live."""
    deleted = deleted_positions(meta)
    if len(deleted) == 0:
        return None
    if positions is None:
        mask = np.ones(num_rows, dtype=bool)
        mask[deleted[deleted < num_rows]] = False
        return mask
    return ~np.isin(positions, deleted, assume_unique=True)


def live_rows(files: Sequence[DataFileMeta]) -> np.ndarray | None:
    """Which rows of ``files``, read whole and concatenated in order, are live; None when
    no file has a vector."""
    if not any(f.deletion_vector for f in files):
        return None
    mask = np.ones(sum(f.row_count for f in files), dtype=bool)
    start = 0
    for f in files:
        mask[start + deleted_positions(f).astype(np.int64)] = False
        start += f.row_count
    return mask


def drop_deleted(
    meta: DataFileMeta, data: pa.Table, positions: np.ndarray | None = None
) -> pa.Table:
    """The rows of ``data`` (read from ``meta``'s file) that its vector does not delete."""
    mask = live_mask(meta, positions, data.num_rows)
    return data if mask is None else data.filter(pa.array(mask))


def read_live(ctx: TableContext, partition: Partition, bucket: int, meta: DataFileMeta) -> pa.Table:
    """A data file's rows without the ones its vector deletes (compaction, lookups)."""
    return drop_deleted(meta, read_bucket_file(ctx, partition, bucket, meta))
