"""Merge engines: collapse the versions of each key into its current row, vectorized.

Input is a key-value table in the data file layout (``_KEY_*`` columns,
``_SEQUENCE_NUMBER``, ``_VALUE_KIND``, value columns) holding any number of
rows per key, from one memtable or many sorted runs. Everything here works on
whole columns: a sort by (key, sequence), then group boundaries found by
comparing neighbouring keys, then per-group reductions (numpy ``reduceat`` or
Arrow hash aggregation over a dense group id).

Semantics:

- deduplicate: the row with the highest sequence wins; if it is a retraction
  (-U or -D) the key is gone.
- first-row: the row with the lowest sequence among +I/+U wins; -U/-D are ignored.
- partial-update: -D removes the key (later rows start from nothing), -U is
  ignored, +I/+U overwrite the fields they carry as non-null.
- aggregation (Paimon semantics): each value field is combined with its
  ``fields.<name>.aggregate-function`` (default last_non_null_value); -U rows
  retract: ``sum`` subtracts them, a field with ``fields.<name>.ignore-retract``
  skips them, any other function refuses them (RetractionNotSupported). A -D
  retracts the same way, or with ``aggregation.remove-record-on-delete`` resets
  the key like partial-update.

With ``drop_deletes=False`` (flushing a memtable, compacting to a level that
is not the last) the result keeps what older runs still need: the final
retraction of a deduplicate key, for partial-update/aggregation the -D that
resets a key, followed by the merged row, and for aggregation a key holding only
retractions as one -U row.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from filestore.errors import InvalidOption, RetractionNotSupported
from filestore.format.options import CoreOptions
from filestore.format.row_kind import (
    DELETE,
    INSERT,
    SEQUENCE_NUMBER,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    VALUE_KIND,
)

_SYSTEM = (SEQUENCE_NUMBER, VALUE_KIND)


def take_rows(table: pa.Table, indices: np.ndarray) -> pa.Table:
    """Rows ``indices`` of ``table``, for indices this package computed (known in range)."""
    return pc.take(table, pa.array(indices), boundscheck=False)


def integer_keys(table: pa.Table, key_columns: Sequence[str]) -> np.ndarray | None:
    """The key as one numpy integer array, when it is a single non-null integer column."""
    if len(key_columns) != 1:
        return None
    col = table.column(key_columns[0])
    if not pa.types.is_integer(col.type) or col.null_count:
        return None
    return np.asarray(col.to_numpy())


def strictly_increasing(values: np.ndarray) -> bool:
    """Whether ``values`` ascend with no repeat (a sorted run's keys, one row per key)."""
    return bool((values[1:] > values[:-1]).all())


def _ties(sorted_keys: np.ndarray) -> bool:
    return bool((sorted_keys[1:] == sorted_keys[:-1]).any())


def _packed_stable_order(keys: np.ndarray, *, runs: bool) -> np.ndarray | None:
    """Stable arg-sort as a value sort: each key (less the minimum) shifted left with its
    position in the low bits, sorted, positions masked out. Sorting values is about twice
    as fast as arg-sorting; None when the key range leaves too few bits for positions.
    ``runs``: the keys are a few concatenated sorted runs (timsort merges them)."""
    n = len(keys)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    bits = max(1, (n - 1).bit_length())
    lo, hi = int(keys.min()), int(keys.max())
    if hi - lo >= 1 << (63 - bits):
        return None
    if keys.dtype == np.uint64:
        packed = (keys - np.uint64(lo)).astype(np.int64)
    else:
        packed = keys.astype(np.int64) - lo
    packed <<= bits
    packed |= np.arange(n, dtype=np.int64)
    if runs:
        packed.sort(kind="stable")
    else:
        # the packed values are unique, so any sort is stable; polars' integer sort is
        # 3-4x numpy's on shuffled keys (one thread), numpy's timsort wins on runs
        packed = pl.Series(packed).sort().to_numpy()
    return np.bitwise_and(packed, (1 << bits) - 1)


def _integer_sort_order(keys: np.ndarray, seqs: pa.ChunkedArray | None) -> np.ndarray:
    """Arg-sort by key; among equal keys by sequence (``seqs``) or else by position.

    Without ties any sort is right, so the fast unstable one is tried first
    unless the keys are a few concatenated sorted runs: then numpy's stable
    sort (timsort) merges the runs in about linear time.
    """
    if seqs is None:
        descents = int(np.count_nonzero(keys[1:] < keys[:-1]))
        packed = _packed_stable_order(keys, runs=descents <= 64)
        if packed is not None:
            return packed
        if descents <= 64:  # concatenated sorted runs
            return np.argsort(keys, kind="stable")
    order = np.argsort(keys)
    if not _ties(keys[order]):
        return order
    if seqs is None:
        return np.argsort(keys, kind="stable")
    return np.lexsort((np.asarray(seqs.to_numpy()), keys))


def sort_order(
    table: pa.Table, key_columns: Sequence[str], *, in_sequence_order: bool = False
) -> np.ndarray:
    """Permutation ordering rows by key, then sequence number.

    ``in_sequence_order``: the rows are already in sequence order (a memtable, or
    runs concatenated oldest first), so a stable sort on the key alone suffices,
    and on concatenated sorted runs that is close to a linear merge. A single
    integer key is sorted as packed integers (``_packed_stable_order``); other keys
    with polars' parallel arg-sort.
    """
    keys = integer_keys(table, key_columns)
    if keys is not None:
        seqs = None if in_sequence_order else table.column(SEQUENCE_NUMBER)
        return _integer_sort_order(keys, seqs)
    cols = list(key_columns) if in_sequence_order else [*key_columns, SEQUENCE_NUMBER]
    frame = pl.from_arrow(table.select(cols), rechunk=False)
    assert isinstance(frame, pl.DataFrame)
    expr = pl.arg_sort_by(cols, maintain_order=in_sequence_order)
    return np.asarray(frame.select(expr).to_series().to_numpy())


def sort_by_key(
    table: pa.Table, key_columns: Sequence[str], *, in_sequence_order: bool = False
) -> pa.Table:
    """Rows ordered by key, then sequence number."""
    if table.num_rows <= 1:
        return table
    return take_rows(table, sort_order(table, key_columns, in_sequence_order=in_sequence_order))


def group_starts(table: pa.Table, key_columns: Sequence[str]) -> np.ndarray:
    """Boolean mask: True where a row's key differs from the previous row's (table sorted)."""
    n = table.num_rows
    first = np.ones(n, dtype=bool)
    if n <= 1:
        return first
    differs = np.zeros(n - 1, dtype=bool)
    for name in key_columns:
        col = table.column(name)
        neq = pc.not_equal(col.slice(1), col.slice(0, n - 1))
        differs |= np.asarray(neq.to_numpy(zero_copy_only=False), dtype=bool)
    first[1:] = differs
    return first


def _kinds(table: pa.Table) -> np.ndarray:
    return np.asarray(table.column(VALUE_KIND).to_numpy(zero_copy_only=False))


def _is_add(kinds: np.ndarray) -> np.ndarray:
    added: np.ndarray = (kinds == INSERT) | (kinds == UPDATE_AFTER)
    return added


def merge_sorted(
    table: pa.Table,
    key_columns: Sequence[str],
    options: CoreOptions,
    *,
    drop_deletes: bool,
) -> pa.Table:
    """Merge a (key, sequence)-sorted key-value table: one current row per key."""
    if table.num_rows == 0:
        return table
    engine = options.merge_engine
    if engine == "deduplicate":
        return _deduplicate(table, key_columns, drop_deletes)
    if engine == "first-row":
        return _first_row(table, key_columns)
    return _partial_or_aggregate(table, key_columns, options, drop_deletes)


def merge(
    table: pa.Table,
    key_columns: Sequence[str],
    options: CoreOptions,
    *,
    drop_deletes: bool,
    in_sequence_order: bool = False,
) -> pa.Table:
    """Sort then merge (see sort_order for ``in_sequence_order``)."""
    if table.num_rows <= 1:
        return merge_sorted(table, key_columns, options, drop_deletes=drop_deletes)
    if options.merge_engine == "deduplicate":
        # decide the winners on the key columns alone, then move only the winning rows
        chosen = winner_indices(
            table, key_columns, drop_deletes=drop_deletes, in_order=in_sequence_order
        )
        if len(chosen) == table.num_rows and strictly_increasing(chosen):
            return table  # already sorted, nothing to drop
        return take_rows(table, chosen)
    order = sort_order(table, key_columns, in_sequence_order=in_sequence_order)
    return merge_sorted(take_rows(table, order), key_columns, options, drop_deletes=drop_deletes)


def winner_indices(
    table: pa.Table, key_columns: Sequence[str], *, drop_deletes: bool, in_order: bool = False
) -> np.ndarray:
    """Deduplicate engine: row indices of the last version of each key, in key order.

    ``table`` needs the key columns, ``_VALUE_KIND`` and (unless ``in_order``,
    see sort_order) ``_SEQUENCE_NUMBER``; with ``drop_deletes`` keys whose last
    version is a retraction are left out. Gathering only the columns a caller
    needs with these indices is cheaper than merging the whole table.
    """
    if table.num_rows == 0:
        return np.empty(0, dtype=np.int64)
    order = sort_order(table, key_columns, in_sequence_order=in_order)
    last = _winners(table, key_columns, order, drop_deletes)
    return order if last.all() else order[last]


def _winners(
    table: pa.Table, key_columns: Sequence[str], order: np.ndarray, drop_deletes: bool
) -> np.ndarray:
    """Mask over ``order``: True for the last row of each key (an add, with drop_deletes)."""
    keys = integer_keys(table, key_columns)
    if keys is None:
        return _last_of_group(
            table.select([*key_columns, VALUE_KIND]).take(order), key_columns, drop_deletes
        )
    sorted_keys = keys[order]
    last = np.empty(len(order), dtype=bool)
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=last[:-1])
    last[-1] = True
    if drop_deletes:
        kinds = _kinds(table)
        if not _is_add(kinds).all():
            last &= _is_add(kinds[order])
    return last


def _last_of_group(table: pa.Table, key_columns: Sequence[str], drop_deletes: bool) -> np.ndarray:
    starts = group_starts(table, key_columns)
    last = np.empty_like(starts)
    last[:-1] = starts[1:]
    last[-1] = True
    if drop_deletes:
        last &= _is_add(_kinds(table))
    return last


def _deduplicate(table: pa.Table, key_columns: Sequence[str], drop_deletes: bool) -> pa.Table:
    last = _last_of_group(table, key_columns, drop_deletes)
    if last.all():
        return table
    return table.filter(pa.array(last))


def _first_row(table: pa.Table, key_columns: Sequence[str]) -> pa.Table:
    adds = _is_add(_kinds(table))
    if not adds.all():
        table = table.filter(pa.array(adds))
    if table.num_rows == 0:
        return table
    starts = group_starts(table, key_columns)
    return table if starts.all() else table.filter(pa.array(starts))


def check_retractable(table_name: str, columns: Sequence[str], options: CoreOptions) -> None:
    """Refuse retractions (-U, or -D that does not remove the key) for ``columns`` whose
    aggregate function cannot take a value back, naming the columns and the fixes."""
    bad = options.unretractable_columns(columns)
    if bad:
        raise _retraction_error(table_name, bad, options)


def _retraction_error(
    table_name: str | None, bad: Sequence[str], options: CoreOptions
) -> InvalidOption:
    funcs = ", ".join(f"{c!r} ({options.aggregate_function(c)})" for c in bad)
    hint = (
        ""
        if options.aggregation_remove_record_on_delete
        else ("; for -D rows 'aggregation.remove-record-on-delete'='true' removes the key instead")
    )
    return RetractionNotSupported(
        f"{f'table {table_name}: ' if table_name else ''}-U/-D rows retract values, but the aggregate function of "
        f"column {funcs} cannot retract; set 'fields.{bad[0]}.ignore-retract'='true' to "
        f"ignore retractions for it{hint}"
    )


def _partial_or_aggregate(
    table: pa.Table, key_columns: Sequence[str], options: CoreOptions, drop_deletes: bool
) -> pa.Table:
    kinds = _kinds(table)
    aggregate = options.merge_engine == "aggregation"
    if not aggregate and (kinds == UPDATE_BEFORE).any():  # partial-update ignores -U
        table = table.filter(pa.array(kinds != UPDATE_BEFORE))
        kinds = _kinds(table)
    if table.num_rows == 0:
        return table
    # a -D resets the key under partial-update, and under aggregation with
    # remove-record-on-delete; otherwise aggregation retracts it like a -U
    resets = not aggregate or options.aggregation_remove_record_on_delete
    if not (resets and (kinds == DELETE).any()):
        return _aggregate_groups(table, key_columns, options, drop_deletes)
    starts = group_starts(table, key_columns)
    group_id = np.cumsum(starts) - 1
    positions = np.arange(table.num_rows)
    # Position of each group's last -D; rows before it belong to a deleted past.
    delete_pos = np.where(kinds == DELETE, positions, -1)
    last_delete = np.maximum.reduceat(delete_pos, np.flatnonzero(starts))[group_id]
    keep = positions >= last_delete
    deletes = table.filter(pa.array(keep & (kinds == DELETE))) if not drop_deletes else None
    rows = table.filter(pa.array(keep & (kinds != DELETE)))
    merged = _aggregate_groups(rows, key_columns, options, drop_deletes) if rows.num_rows else rows
    if deletes is None or deletes.num_rows == 0:
        return merged
    return sort_by_key(pa.concat_tables([deletes, merged]), key_columns)


def _aggregate_groups(
    rows: pa.Table, key_columns: Sequence[str], options: CoreOptions, drop_deletes: bool
) -> pa.Table:
    """One row per key: the key, max sequence, a kind, and each value field reduced.

    Aggregation with retractions (-U, or -D that does not reset): ``sum`` subtracts
    them, functions with ``ignore-retract`` skip them, other configured functions
    refuse them. A key whose rows are all retractions stays a key; when merging runs
    (``drop_deletes=False``) it is kept as one -U row carrying the retracted sum, so
    a later merge with older runs subtracts it (merging stays associative).
    """
    starts = group_starts(rows, key_columns)
    start_idx = np.flatnonzero(starts)
    n = rows.num_rows
    end_idx = np.append(start_idx[1:], n) - 1
    group_id = np.cumsum(starts) - 1
    partial = options.merge_engine == "partial-update"
    kinds = _kinds(rows)
    adds = _is_add(kinds)
    retracting = not partial and not adds.all()
    out = {}
    for name in rows.column_names:
        col = rows.column(name)
        if name in key_columns:
            out[name] = col.take(pa.array(start_idx))
        elif name in _SYSTEM:
            out[name] = col.take(pa.array(end_idx))  # sorted: the last row has the max sequence
        elif partial:
            out[name] = _reduce(col, "last_non_null_value", start_idx, end_idx, group_id)
        elif not retracting or f"fields.{name}.aggregate-function" not in options.raw:
            # unconfigured columns (key copies, partition columns: constant per key) see
            # every row; writes refuse retractions for unconfigured value columns
            func = options.aggregate_function(name)
            if retracting and options.ignore_retract(name):
                out[name] = _reduce(col, func, start_idx, end_idx, group_id, adds)
            else:
                out[name] = _reduce(col, func, start_idx, end_idx, group_id)
        else:
            out[name] = _reduce_retracting(
                name, col, options, start_idx, end_idx, group_id, adds, drop_deletes
            )
    if retracting:
        out[VALUE_KIND] = _group_kinds(kinds, adds, start_idx, drop_deletes)
    return pa.Table.from_arrays([out[n] for n in rows.column_names], schema=rows.schema)


def _last_add(adds: np.ndarray, start_idx: np.ndarray) -> np.ndarray:
    """Per group: position of its last +I/+U row, -1 when it has none."""
    return np.maximum.reduceat(np.where(adds, np.arange(len(adds)), -1), start_idx)


def _group_kinds(
    kinds: np.ndarray, adds: np.ndarray, start_idx: np.ndarray, drop_deletes: bool
) -> pa.Array:
    """The last add's kind; a group of retractions only is -U while runs are merged
    (it still has to retract from older runs) and +I in a final result."""
    last_add = _last_add(adds, start_idx)
    lone = INSERT if drop_deletes else UPDATE_BEFORE
    chosen = np.where(last_add >= 0, kinds[np.maximum(last_add, 0)], lone)
    return pa.array(chosen.astype(np.int8), pa.int8())


def _reduce_retracting(
    name: str,
    col: pa.ChunkedArray,
    options: CoreOptions,
    start_idx: np.ndarray,
    end_idx: np.ndarray,
    group_id: np.ndarray,
    adds: np.ndarray,
    drop_deletes: bool,
) -> pa.Array | pa.ChunkedArray:
    func = options.aggregate_function(name)
    if options.ignore_retract(name):
        return _reduce(col, func, start_idx, end_idx, group_id, adds)
    if func != "sum":
        raise _retraction_error(None, [name], options)
    signed = pc.if_else(pa.array(adds), col, pc.negate(col))
    total = _reduce(signed, "sum", start_idx, end_idx, group_id)
    if drop_deletes:
        return total
    # a group of retractions only is written as a -U row: store what it takes back
    lone = pa.array(_last_add(adds, start_idx) < 0)
    return pc.if_else(lone, pc.negate(total), total)


def _reduce(
    col: pa.ChunkedArray | pa.Array,
    func: str,
    start_idx: np.ndarray,
    end_idx: np.ndarray,
    group_id: np.ndarray,
    use: np.ndarray | None = None,
) -> pa.Array | pa.ChunkedArray:
    """Reduce each group of ``col``; ``use`` (mask) limits it to some rows."""
    n = len(col)
    positions = np.arange(n)
    if func in ("last_value", "first_value"):
        if use is None:
            return col.take(pa.array(end_idx if func == "last_value" else start_idx))
        if func == "last_value":
            chosen = np.maximum.reduceat(np.where(use, positions, -1), start_idx)
        else:
            chosen = np.minimum.reduceat(np.where(use, positions, n), start_idx)
        return _take_or_null(col, chosen)
    if func in ("last_non_null_value", "first_non_null_value"):
        valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        if use is not None:
            valid &= use
        if func == "last_non_null_value":
            chosen = np.maximum.reduceat(np.where(valid, positions, -1), start_idx)
        else:
            chosen = np.minimum.reduceat(np.where(valid, positions, n), start_idx)
        return _take_or_null(col, chosen)
    if use is not None:
        col = pc.if_else(pa.array(use), col, pa.scalar(None, col.type))
    # sum / min / max: Arrow's hash aggregation over a dense group id keeps group order
    grouped = pa.table({"g": pa.array(group_id), "v": col}).group_by("g", use_threads=False)
    result = grouped.aggregate([("v", func)]).column(f"v_{func}")
    return result.cast(col.type, safe=False) if result.type != col.type else result


def _take_or_null(col: pa.ChunkedArray | pa.Array, chosen: np.ndarray) -> pa.Array:
    n = len(col)
    missing = (chosen < 0) | (chosen >= n)
    idx = pa.array(np.where(missing, 0, chosen), mask=missing)
    return col.take(idx)
