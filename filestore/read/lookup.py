"""Changelog by lookup: the exact changes new level-0 rows make to a bucket's state.

As in Paimon's lookup changelog producer: for every key the new rows touch, the
key's current value is looked up in the bucket's other files (old), the new rows
are merged onto it with the table's merge engine (new), and the difference
(+I, -U/+U, -D) is stored as a changelog file. Two producers use it:

- ``changelog-producer=lookup``: a compaction of level-0 files over the levels
  above, stored with its COMPACT snapshot (``filestore.maintenance.compaction``);
- ``changelog-producer=auto`` (default): an APPEND commit's new files over the
  bucket's live files, stored with that commit (``filestore.commit.lookup``).

Only the touched keys are merged: each old file is read and cut down to the rows
of those keys (a binary search, or a polars semi-join) before the merge, so the cost
is reading the bucket's files once, not merging its whole state; a table handle that
commits repeatedly reads each file once (``filestore.io.file_cache``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import polars as pl
import pyarrow as pa

from filestore.errors import FileStoreError
from filestore.format.data_file import DataFileMeta, FileSource
from filestore.format.row_kind import (
    INSERT,
    ROW_KIND_COLUMN,
    SEQUENCE_NUMBER,
    UPDATE_AFTER,
    VALUE_KIND,
    parse_row_kinds,
)
from filestore.format.schema import KEY_PREFIX
from filestore.format.snapshot import Snapshot
from filestore.read.changes import diff_states, indexed_frame, with_row_kind
from filestore.read.merge import integer_keys, merge, strictly_increasing, take_rows, winner_indices
from filestore.state.bucket_file import align, key_value_schema, read_for_lookup, write_bucket_file
from filestore.state.context import Partition, TableContext
from filestore.state.deletion_vectors import live_mask, with_deleted
from filestore.threads import parallel_map

_T = TypeVar("_T")

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


def _positions_with_keys(rows: pa.Table, probe: pl.DataFrame, keys: list[str]) -> np.ndarray:
    frame = indexed_frame(rows.select(keys), _ROW)
    hit: np.ndarray = frame.join(probe, on=keys, how="semi", nulls_equal=True)[_ROW].to_numpy()
    return hit


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


def _per_file(
    ctx: TableContext,
    partition: Partition,
    bucket: int,
    files: Sequence[DataFileMeta],
    one: Callable[[DataFileMeta], _T],
) -> list[_T]:
    """``one`` of each file, in order: in the FileStore's threads when some file must be
    decoded from disk; in this thread when the file cache holds them all, where the
    work is a search and a gather, less than handing it to other threads costs (a
    log-tier task's lookup of a few keys; it started a pool of its own until 2cc389a,
    ~6 ms, more on a busy core)."""
    cache = ctx.file_cache
    if len(files) <= 1 or all(
        cache.holds(ctx.data_path(partition, bucket, f.file_name)) for f in files
    ):
        return [one(f) for f in files]
    return parallel_map(one, files)


def _old_rows(
    ctx: TableContext,
    partition: Partition,
    bucket: int,
    files: Sequence[DataFileMeta],
    probe: pl.DataFrame,
) -> pa.Table:
    """Key-value rows of ``files`` whose keys are in ``probe`` (threads, one per core)."""
    kv = key_value_schema(ctx.schema)
    wanted = _wanted_integers(probe)

    def one(f: DataFileMeta) -> pa.Table:
        data = align(read_for_lookup(ctx, partition, bucket, f), kv)
        return take_rows(data, _hit_positions(data, probe, wanted))

    if not files:
        return kv.empty_table()
    return pa.concat_tables(_per_file(ctx, partition, bucket, files, one))


def rows_of_keys(ctx: TableContext, snapshot: Snapshot, bucket: int, keys: pa.Table) -> pa.Table:
    """The rows (table columns) a reader of ``snapshot`` sees for ``keys`` (the primary-key
    columns) in one bucket: each key's versions in the bucket's live files, merged.

    A point lookup, not a scan: the files come from the handle's file cache, so a handle
    that looks up again and again (a log-tier stream's tasks) reads each file once.
    """
    schema = ctx.schema
    if not schema.primary_key:
        raise FileStoreError(f"table {ctx.name} has no primary key: rows have no key to look up")
    kv_keys = [KEY_PREFIX + k for k in schema.primary_key]
    probe = pl.from_arrow(keys.select(list(schema.primary_key)).rename_columns(kv_keys))
    assert isinstance(probe, pl.DataFrame)
    if probe.is_empty():
        return schema.arrow_schema.empty_table()
    files: dict[Partition, list[DataFileMeta]] = {}
    for e in ctx.live_entries(snapshot):
        if e.bucket == bucket:
            files.setdefault(e.partition, []).append(e.file)
    found = [_old_rows(ctx, part, bucket, fs, probe) for part, fs in files.items()]
    if not found:
        return schema.arrow_schema.empty_table()
    # every version of the keys, merged as a read merges them (deletion vectors only
    # spare a read that merge: a read through them equals the merge read)
    merged = merge(pa.concat_tables(found), kv_keys, schema.core_options, drop_deletes=True)
    return merged.select(schema.column_names)


def _wanted_integers(probe: pl.DataFrame) -> np.ndarray | None:
    """The probe's keys, sorted, when they are one integer column without nulls."""
    single = probe.width == 1 and probe.dtypes[0].is_integer() and probe.null_count().item() == 0
    if not single:
        return None
    keys = probe.to_series().to_numpy()
    # one flushed file's keys (the usual probe) are ascending and unique already
    return keys if strictly_increasing(keys) else np.unique(keys)


def _hit_positions(data: pa.Table, probe: pl.DataFrame, wanted: np.ndarray | None) -> np.ndarray:
    """Row positions of ``data`` (key-value rows) whose key is in ``probe``, in order."""
    kv_keys = list(probe.columns)
    keys = integer_keys(data, kv_keys) if wanted is not None else None
    if keys is not None and wanted is not None and strictly_increasing(keys):
        return _integer_hits(keys, wanted)
    return _positions_with_keys(data, probe, kv_keys)


def _new_rows(
    ctx: TableContext, partition: Partition, bucket: int, files: Sequence[DataFileMeta]
) -> tuple[pa.Table, np.ndarray]:
    """The new files' key-value rows (oldest file first) and where each file starts."""
    kv = key_value_schema(ctx.schema)
    tables = [align(read_for_lookup(ctx, partition, bucket, f), kv) for f in files]
    starts = np.cumsum([0, *(t.num_rows for t in tables)])
    return pa.concat_tables(tables), starts


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
    written, _starts = _new_rows(ctx, partition, bucket, files)
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


# -- deletion vectors (merge-on-write) ---------------------------------------------
@dataclass(frozen=True)
class VectorLookup:
    """What new files do to a bucket with deletion vectors: the rows they supersede."""

    changes: pa.Table | None  # as Lookup.changes (None: only inserts, rows not needed)
    only_inserts: bool
    grown: tuple[DataFileMeta, ...]  # old files whose vectors grew, with the new vectors
    new_files: tuple[DataFileMeta, ...]  # the new files, each with its vector (if any)


def lookup_vectors(
    ctx: TableContext,
    partition: Partition,
    bucket: int,
    level0: Sequence[DataFileMeta],
    upper: Sequence[DataFileMeta],
    *,
    need_changes: bool,
) -> VectorLookup:
    """The deletion vectors (and, with ``need_changes``, the changes) of committing
    ``level0`` over ``upper``, the bucket's live files.

    Every row of ``upper`` whose key the new rows touch is superseded: the commit numbers
    new rows above every committed one (``filestore.commit._rebase``). Among the new rows each
    key's last one wins; the others, and a winner that is a retraction, are deleted too,
    so after the commit every key has at most one live row in the bucket, an add.
    """
    files = sorted(level0, key=lambda f: f.min_sequence_number)
    upper = _overlapping(files, upper)
    if not upper and len(files) == 1 and not files[0].delete_row_count:
        return VectorLookup(None, True, (), tuple(files))  # one flushed file: a key per row
    schema = ctx.schema
    keys = list(schema.primary_key)
    kv_keys = [KEY_PREFIX + k for k in keys]
    written, starts = _new_rows(ctx, partition, bucket, files)
    probe = pl.from_arrow(written.select(kv_keys), rechunk=False)
    assert isinstance(probe, pl.DataFrame)
    kinds = np.asarray(written.column(VALUE_KIND).to_numpy(zero_copy_only=False))
    if ((kinds == INSERT) | (kinds == UPDATE_AFTER)).all() and probe.n_unique() == probe.height:
        # one add per key (the usual batch): every new row is live, no sort for winners
        live = np.arange(written.num_rows)
    else:
        live = winner_indices(written, kv_keys, drop_deletes=True, in_order=False)
    dead = np.ones(written.num_rows, dtype=bool)
    dead[live] = False
    new_files = tuple(
        with_deleted(f, np.flatnonzero(dead[starts[i] : starts[i + 1]]))
        for i, f in enumerate(files)
    )
    grown, old = _superseded(ctx, partition, bucket, upper, probe)
    if not grown and not dead.any():
        return VectorLookup(None, True, (), new_files)
    if not need_changes:
        return VectorLookup(None, False, grown, new_files)
    new = take_rows(written, np.sort(live)).select(schema.column_names)
    return VectorLookup(diff_states(old, new.cast(old.schema), keys), False, grown, new_files)


def _superseded(
    ctx: TableContext,
    partition: Partition,
    bucket: int,
    files: Sequence[DataFileMeta],
    probe: pl.DataFrame,
) -> tuple[tuple[DataFileMeta, ...], pa.Table]:
    """The ``files`` whose live rows of ``probe``'s keys are now deleted (with their grown
    vectors), and those rows (table columns: the keys' old values)."""
    schema = ctx.schema
    kv = key_value_schema(schema)
    wanted = _wanted_integers(probe)

    def one(f: DataFileMeta) -> tuple[DataFileMeta | None, pa.Table]:
        data = align(read_for_lookup(ctx, partition, bucket, f), kv)
        hits = _hit_positions(data, probe, wanted)
        live = live_mask(f, hits, len(hits))
        if live is not None:
            hits = hits[live]
        if len(hits) == 0:
            return None, kv.empty_table()
        return with_deleted(f, hits), take_rows(data, hits)

    found = _per_file(ctx, partition, bucket, files, one)
    rows = pa.concat_tables([kv.empty_table(), *(t for _, t in found)])
    return tuple(m for m, _ in found if m is not None), rows.select(schema.column_names)
