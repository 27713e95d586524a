"""Changelog by lookup: the exact changes new level-0 rows make to a bucket's state.

As in Paimon's lookup changelog producer: for every key the new rows touch, the
key's current value is looked up in the bucket's other files (old), the new rows
are merged onto it with the table's merge engine (new), and the difference
(+I, -U/+U, -D) is stored as a changelog file. Two producers use it:

- ``changelog-producer=lookup``: a compaction of level-0 files over the levels
  above, stored with its COMPACT snapshot (``filestore.compaction``);
- ``changelog-producer=auto`` (default): an APPEND commit's new files over the
  bucket's live files, stored with that commit (``filestore.commit_lookup``).

Only the touched keys are merged: each old file is read and cut down to the rows
of those keys (a polars semi-join) before the merge, so the cost is reading the
bucket's files once, not merging its whole state.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa

from filestore.bucket_file import align, key_value_schema, read_bucket_file, write_bucket_file
from filestore.changes import diff_states, indexed_frame, with_row_kind
from filestore.context import Partition, TableContext
from filestore.data_file import DataFileMeta, FileSource
from filestore.merge import integer_keys, merge, take_rows
from filestore.row_kind import (
    INSERT,
    ROW_KIND_COLUMN,
    SEQUENCE_NUMBER,
    UPDATE_AFTER,
    VALUE_KIND,
    parse_row_kinds,
)
from filestore.schema import KEY_PREFIX

_ROW = "__dts_row"


def _as_kv(values: pa.Table, kv: pa.Schema, keys: Sequence[str], seq: int) -> pa.Table:
    """Rows as key-value rows of one sequence number ``seq`` (all +I)."""
    n = values.num_rows
    arrays = {KEY_PREFIX + k: values.column(k) for k in keys}
    arrays[SEQUENCE_NUMBER] = pa.array(np.full(n, seq, dtype=np.int64))
    arrays[VALUE_KIND] = pa.array(np.full(n, INSERT, dtype=np.int8))
    for c in values.column_names:
        arrays[c] = values.column(c)
    return align(pa.table(arrays), kv)


def _rows_with_keys(rows: pa.Table, probe: pl.DataFrame, keys: list[str]) -> pa.Table:
    frame = indexed_frame(rows, _ROW)
    hit = frame.join(probe, on=keys, how="semi", nulls_equal=True)[_ROW].to_numpy()
    return rows.take(pa.array(hit))


@dataclass(frozen=True)
class Lookup:
    """What new level-0 rows change in one bucket."""

    # table columns + _row_kind: -D, +I, -U/+U pairs; None when only_inserts and the
    # caller did not need the rows
    changes: pa.Table | None
    only_inserts: bool  # every new row is a new key with no retraction: changes == the rows


def _overlapping(
    level0: Sequence[DataFileMeta], upper: Sequence[DataFileMeta]
) -> list[DataFileMeta]:
    """The files of ``upper`` whose key range meets the new files' (by their statistics):
    new keys above the table's greatest, the common CDC insert, read no old file."""
    lows, highs = [f.min_key() for f in level0], [f.max_key() for f in level0]
    if any(k is None for k in (*lows, *highs)):
        return list(upper)
    try:
        lo, hi = min(lows), max(highs)  # type: ignore[type-var]
        return [
            f
            for f in upper
            if f.min_key() is None or not (f.max_key() < lo or f.min_key() > hi)  # type: ignore[operator]
        ]
    except TypeError:  # keys that do not compare (nulls): read them all
        return list(upper)


def _integer_hits(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Positions of ``keys`` (a data file's, sorted: one row per key) found in ``wanted``
    (sorted): a binary search per wanted key, not a join."""
    at: np.ndarray = np.searchsorted(keys, wanted)
    inside = at < len(keys)
    found: np.ndarray = at[inside]
    hits: np.ndarray = found[keys[found] == wanted[inside]]
    return hits


def _old_rows(
    ctx: TableContext,
    partition: Partition,
    bucket: int,
    files: Sequence[DataFileMeta],
    probe: pl.DataFrame,
) -> pa.Table:
    """Key-value rows of ``files`` whose keys are in ``probe`` (threads, one per core)."""
    kv = key_value_schema(ctx.schema)
    kv_keys = list(probe.columns)
    single = probe.width == 1 and probe.dtypes[0].is_integer() and probe.null_count().item() == 0
    wanted = np.unique(probe.to_series().to_numpy()) if single else None

    def one(f: DataFileMeta) -> pa.Table:
        data = align(read_bucket_file(ctx, partition, bucket, f), kv)
        keys = integer_keys(data, kv_keys) if wanted is not None else None
        if keys is not None and wanted is not None and bool((keys[1:] > keys[:-1]).all()):
            return take_rows(data, _integer_hits(keys, wanted))
        return _rows_with_keys(data, probe, kv_keys)

    if not files:
        return kv.empty_table()
    workers = min(len(files), os.cpu_count() or 1)
    with ThreadPoolExecutor(workers, thread_name_prefix="filestore-lookup") as pool:
        return pa.concat_tables(list(pool.map(one, files)))


def lookup_changes(
    ctx: TableContext,
    partition: Partition,
    bucket: int,
    level0: Sequence[DataFileMeta],
    upper: Sequence[DataFileMeta],
    *,
    need_rows: bool = True,
) -> Lookup:
    """The changes of merging ``level0`` (new files) over ``upper`` (the bucket's files
    holding the state before them). Without ``need_rows``, one new file of new keys
    only (no old file's key range meets it, no retraction: a flushed file holds one
    row per key) is known from statistics alone, and nothing is read."""
    upper = _overlapping(level0, upper)
    if not need_rows and not upper and len(level0) == 1 and not level0[0].delete_row_count:
        return Lookup(None, True)
    schema = ctx.schema
    keys = list(schema.primary_key)
    kv = key_value_schema(schema)
    kv_keys = [KEY_PREFIX + k for k in keys]
    files = sorted(level0, key=lambda f: f.min_sequence_number)
    written = pa.concat_tables(
        [align(read_bucket_file(ctx, partition, bucket, f), kv) for f in files]
    )
    probe = pl.from_arrow(written.select(kv_keys), rechunk=False)
    assert isinstance(probe, pl.DataFrame)
    old_kv = merge(
        _old_rows(ctx, partition, bucket, upper, probe),
        kv_keys,
        schema.core_options,
        drop_deletes=True,
    )
    old = old_kv.select(schema.column_names)
    kinds = np.asarray(written.column(VALUE_KIND).to_numpy(zero_copy_only=False))
    retracts = bool(((kinds != INSERT) & (kinds != UPDATE_AFTER)).any())
    if old.num_rows == 0 and not retracts and probe.n_unique() == probe.height:
        return Lookup(with_row_kind(written.select(schema.column_names), INSERT), True)
    if len(files) == 1 and schema.core_options.merge_engine == "deduplicate":
        # a flushed file holds one row per key, the latest: the new state of the keys
        # it touches is its rows that are not retractions, no merge with the old rows
        live = pa.array((kinds == INSERT) | (kinds == UPDATE_AFTER))
        new = align(written.filter(live).select(schema.column_names), old.schema)
        return Lookup(diff_states(old, new, keys), False)
    # the old rows are older than every level-0 row
    low = min(f.min_sequence_number for f in files) - 1
    merged = merge(
        pa.concat_tables([_as_kv(old, kv, keys, low), written]),
        kv_keys,
        schema.core_options,
        drop_deletes=True,
    )
    new = align(merged.select(schema.column_names), old.schema)
    return Lookup(diff_states(old, new, keys), False)


def write_changes(
    ctx: TableContext,
    partition: Partition,
    bucket: int,
    changes: pa.Table,
    seq: int,
    file_source: FileSource,
) -> DataFileMeta:
    """``changes`` (with ``_row_kind``) as a changelog file of key-value rows numbered ``seq``."""
    schema = ctx.schema
    keys = list(schema.primary_key)
    kv = key_value_schema(schema)
    data = _as_kv(changes.drop_columns([ROW_KIND_COLUMN]), kv, keys, seq)
    kinds = parse_row_kinds(changes.column(ROW_KIND_COLUMN))
    data = data.set_column(data.schema.get_field_index(VALUE_KIND), VALUE_KIND, kinds)
    return write_bucket_file(
        ctx, schema, partition, bucket, data, level=0, file_source=file_source, prefix="changelog"
    )


def lookup_changelog(
    ctx: TableContext,
    partition: Partition,
    bucket: int,
    level0: Sequence[DataFileMeta],
    upper: Sequence[DataFileMeta],
) -> DataFileMeta | None:
    """changelog-producer=lookup: the changelog file of compacting ``level0`` over
    ``upper`` (every file of the bucket above level 0); None when it changes nothing."""
    found = lookup_changes(ctx, partition, bucket, level0, upper)
    if found.changes is None or found.changes.num_rows == 0:
        return None
    seq = min(f.min_sequence_number for f in level0)
    return write_changes(ctx, partition, bucket, found.changes, seq, FileSource.COMPACT)
