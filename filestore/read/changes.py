"""Changelog reads: the rows that changed between two snapshots, with ``_row_kind``.

Table option ``changelog-producer`` decides where the changes come from:

- ``auto`` (default): every APPEND commit stores its exact changes (+I, -U/+U,
  -D) as changelog files of its snapshot: a writer whose rows are a full
  changelog as written, any other commit (the worker's too) by looking up the
  old values of the keys it writes (``commit_lookup``). changes() concatenates the stored changelog of every
  snapshot in (start, end], so its cost follows the changes, not the table.
  COMPACT snapshots change no rows; an OVERWRITE (or a snapshot written before
  the option) makes the range fall back to the diff.
- ``none``: computed on read. The buckets whose files differ between the two
  snapshots are read at both and diffed by primary key (-D, +I, -U/+U pairs),
  so the result is the net change and is right across compactions, which
  change files but not rows. Needs only the two snapshots.
- ``input``: the writer stores its input rows (before merging) as changelog
  files; changes() concatenates those of every snapshot in (start, end].
- ``lookup``: compaction produces it (see lookup.py): every compaction of
  level-0 files looks up the old value of each key they touch in the levels
  above and stores the exact -U/+U, +I, -D as changelog files of its COMPACT
  snapshot; changes() concatenates those of the COMPACT snapshots in range.

With ``auto`` and ``input``, a range that holds a snapshot without changelog (written before
the option was set, or an OVERWRITE) falls back to the diff. With ``lookup`` the
stored changelog covers a range only when neither end holds level-0 files (rows
not yet compacted, so not yet in any changelog); otherwise the diff is used.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa

from filestore.errors import SnapshotNotFound
from filestore.format.manifest import ManifestEntry
from filestore.format.row_kind import (
    DELETE,
    INSERT,
    ROW_KIND_COLUMN,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    VALUE_KIND,
    kinds_to_strings,
)
from filestore.format.snapshot import CommitKind, Snapshot
from filestore.read.merge import integer_keys, strictly_increasing
from filestore.read.scan import Split, TableScan
from filestore.read.split import SplitReader
from filestore.state.bucket_file import align, is_data_file_changelog, read_bucket_file
from filestore.state.context import Partition, TableContext
from filestore.state.levels import has_level0
from filestore.threads import parallel_map

log = logging.getLogger(__name__)

_O, _N = "__dts_old", "__dts_new"


def with_row_kind(data: pa.Table, kind: int) -> pa.Table:
    """``data`` with a ``_row_kind`` column of one kind."""
    codes = pa.array(np.full(data.num_rows, kind, dtype=np.int8))
    return data.append_column(ROW_KIND_COLUMN, kinds_to_strings(codes))


def indexed_frame(data: pa.Table, index: str) -> pl.DataFrame:
    """The table as a polars frame with its row numbers in column ``index``."""
    frame = pl.from_arrow(data, rechunk=False)
    assert isinstance(frame, pl.DataFrame)
    return frame.with_row_index(index)


Matches = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""(old rows whose key is gone, new rows of new keys, old and new rows of common keys)."""


def _unique_order(keys: np.ndarray) -> np.ndarray | None:
    """The permutation sorting integer ``keys`` (no copy work when they already ascend),
    or None when a key repeats."""
    if strictly_increasing(keys):
        return np.arange(len(keys))
    order = np.argsort(keys, kind="stable")
    return order if strictly_increasing(keys[order]) else None


def _match_sorted(ko: np.ndarray, kn: np.ndarray) -> Matches:
    """Matches of two ascending unique integer key arrays: a binary search, no join."""
    at = np.searchsorted(kn, ko)
    inside = at < len(kn)
    common = np.zeros(len(ko), dtype=bool)
    common[inside] = kn[at[inside]] == ko[inside]
    bo = np.flatnonzero(common)
    bn = at[common]
    fresh = np.ones(len(kn), dtype=bool)
    fresh[bn] = False
    return np.flatnonzero(~common), np.flatnonzero(fresh), bo, bn


def _match_rows(old: pa.Table, new: pa.Table, keys: list[str]) -> Matches:
    ko, kn = integer_keys(old, keys), integer_keys(new, keys)
    if ko is not None and kn is not None:
        # the usual lookup: one integer key, once per side (sorted runs already, or the
        # old rows of several files)
        oo, on = _unique_order(ko), _unique_order(kn)
        if oo is not None and on is not None:
            gone, born, bo, bn = _match_sorted(ko[oo], kn[on])
            return oo[gone], on[born], oo[bo], on[bn]
    return _match_joined(old, new, keys)


def _match_joined(old: pa.Table, new: pa.Table, keys: list[str]) -> Matches:
    """Matches by a polars join; only the keys go to polars (converting the values
    would copy every string)."""
    o = indexed_frame(old.select(keys), _O)
    n = indexed_frame(new.select(keys), _N)
    joined = o.join(n, on=keys, how="full", coalesce=True, nulls_equal=True)
    oi, ni = joined[_O], joined[_N]
    both = joined.filter(oi.is_not_null() & ni.is_not_null())
    return (
        joined.filter(ni.is_null())[_O].to_numpy(),
        joined.filter(oi.is_null())[_N].to_numpy(),
        both[_O].to_numpy(),
        both[_N].to_numpy(),
    )


def diff_states(old: pa.Table, new: pa.Table, key_columns: Sequence[str]) -> pa.Table:
    """-D for keys only in old, +I for keys only in new, -U/+U pairs for changed rows."""
    schema = new.schema
    keys = list(key_columns)
    gone, born, bo, bn = _match_rows(old, new, keys)
    before, after = old.take(pa.array(bo)), new.take(pa.array(bn))
    values = [c for c in schema.names if c not in keys]
    if values and len(bo):
        fb, fa = pl.from_arrow(before.select(values)), pl.from_arrow(after.select(values))
        assert isinstance(fb, pl.DataFrame) and isinstance(fa, pl.DataFrame)
        same = np.ones(len(bo), dtype=bool)
        for c in values:
            same &= fb[c].eq_missing(fa[c]).fill_null(True).to_numpy()
        changed = pa.array(~same)
        before, after = before.filter(changed), after.filter(changed)
    else:
        before, after = before.slice(0, 0), after.slice(0, 0)
    m = before.num_rows
    pairs = pa.concat_tables(
        [with_row_kind(before, UPDATE_BEFORE), with_row_kind(after, UPDATE_AFTER)]
    )
    interleave = np.empty(2 * m, dtype=np.int64)
    interleave[0::2], interleave[1::2] = np.arange(m), np.arange(m) + m
    parts = [
        with_row_kind(old.take(pa.array(gone)), DELETE),
        with_row_kind(new.take(pa.array(born)), INSERT),
        pairs.take(pa.array(interleave)),
    ]
    return pa.concat_tables(parts)


def diff_multisets(old: pa.Table, new: pa.Table) -> pa.Table:
    """Append-only tables: rows only in old (-D) or only in new (+I), counting duplicates."""
    cols = old.column_names
    occ = "__dts_occurrence"

    def numbered(t: pa.Table, index: str) -> pl.DataFrame:
        f = indexed_frame(t, index)
        return f.with_columns(pl.int_range(pl.len()).over(cols).alias(occ))

    o, n = numbered(old, _O), numbered(new, _N)
    on = [*cols, occ]
    gone = o.join(n, on=on, how="anti", nulls_equal=True)[_O].to_numpy()
    born = n.join(o, on=on, how="anti", nulls_equal=True)[_N].to_numpy()
    return pa.concat_tables(
        [
            with_row_kind(old.take(pa.array(gone)), DELETE),
            with_row_kind(new.take(pa.array(born)), INSERT),
        ]
    )


def _splits(ctx: TableContext, snap: Snapshot) -> dict[tuple[Partition, int], Split]:
    return {(s.partition_values, s.bucket): s for s in TableScan(ctx, snap).plan()}


def read_state(reader: SplitReader, split: Split | None) -> pa.Table:
    """The merged rows of a split (none for no split)."""
    if split is None:
        return reader.output_schema().empty_table()
    batches = list(reader.read(split))
    return pa.Table.from_batches(batches, schema=reader.output_schema())


def _names(split: Split | None) -> set[str]:
    return {f.file_name for f in split.files} if split is not None else set()


def diff_snapshots(ctx: TableContext, start: Snapshot, end: Snapshot) -> pa.Table:
    """The net change from start to end, bucket by bucket (unchanged buckets are skipped).

    Buckets are diffed in parallel threads (Parquet decoding, polars joins and Arrow
    gathers release the GIL), at most one per core, and concatenated in bucket order.
    """
    schema = ctx.schema
    reader = SplitReader(ctx, schema)
    old_splits, new_splits = _splits(ctx, start), _splits(ctx, end)
    changed = [
        (old_splits.get(key), new_splits.get(key))
        for key in sorted(set(old_splits) | set(new_splits), key=lambda k: (str(k[0]), k[1]))
        if _names(old_splits.get(key)) != _names(new_splits.get(key))
    ]
    if not changed:
        return with_row_kind(reader.output_schema().empty_table(), INSERT)

    def diff(pair: tuple[Split | None, Split | None]) -> pa.Table:
        old, new = read_state(reader, pair[0]), read_state(reader, pair[1])
        if schema.primary_key:
            return diff_states(old, new, schema.primary_key)
        return diff_multisets(old, new)

    return pa.concat_tables(parallel_map(diff, changed))


def changelog_kinds(file_name: str, data: pa.Table) -> pa.Array | pa.ChunkedArray:
    """The row kind codes of a changelog file's rows: its ``_VALUE_KIND``, except that
    a data file listed as its commit's changelog holds new keys only, all +I."""
    if VALUE_KIND in data.column_names and not is_data_file_changelog(file_name):
        return data.column(VALUE_KIND)
    return pa.array(np.full(data.num_rows, INSERT, dtype=np.int8))


def read_changelog_file(ctx: TableContext, entry: ManifestEntry, target: pa.Schema) -> pa.Table:
    """One changelog manifest entry's rows, shaped as ``target`` plus ``_row_kind``."""
    data = read_bucket_file(ctx, entry.partition, entry.bucket, entry.file)
    kinds = changelog_kinds(entry.file.file_name, data)
    rows = align(data, target)
    return rows.append_column(ROW_KIND_COLUMN, kinds_to_strings(kinds))


def _carries_changelog(producer: str, snap: Snapshot) -> bool | None:
    """Whether changes() reads this snapshot's changelog (None: it cannot, diff instead)."""
    if snap.commit_kind == CommitKind.OVERWRITE:
        return None  # its rows replace others the stored changelog does not list
    if producer == "lookup":
        # an APPEND's level-0 rows enter the changelog when they are compacted
        return snap.commit_kind == CommitKind.COMPACT
    if snap.commit_kind == CommitKind.COMPACT:
        return False  # compaction changes files, not rows
    if snap.changelog_manifest_list is None and snap.delta_record_count != 0:
        return None  # written before changelog-producer was set
    return True


def _settled(ctx: TableContext, snap: Snapshot, limit: int) -> Snapshot | None:
    """lookup: the first snapshot from ``snap`` (up to id ``limit``, across COMPACT
    snapshots only, so with the same rows) that holds no level-0 files, i.e. whose
    changes are all in stored changelog; None when there is none."""
    while has_level0(ctx, snap):
        if snap.id >= limit:
            return None
        try:
            nxt = ctx.snapshot_manager.get(snap.id + 1)
        except SnapshotNotFound:
            return None
        if nxt.commit_kind != CommitKind.COMPACT:
            return None
        snap = nxt
    return snap


@dataclass(frozen=True)
class StoredChange:
    """One changelog manifest entry of a snapshot in a changelog read's range."""

    snapshot_id: int
    barrier: int | None
    entry: ManifestEntry


def stored_changelog_files(
    ctx: TableContext, start_id: int, end_id: int
) -> list[StoredChange] | None:
    """The changelog files of (start, end] in snapshot order; None when they do not
    cover the range (``none``, or a snapshot without stored changelog: diff instead).

    With ``lookup``, an end holding level-0 files moves on to the compaction that
    stored their changes, and a start holding them past the compaction whose
    changelog holds changes made up to the start (neither changes the rows).
    """
    producer = ctx.options.changelog_producer
    if producer == "none":
        return None
    get = ctx.snapshot_manager.get
    if producer == "lookup":
        if start_id <= 0:
            return None
        latest = ctx.snapshot_manager.latest_id() or end_id
        settled_start, settled_end = (
            _settled(ctx, get(start_id), end_id),
            _settled(ctx, get(end_id), latest),
        )
        if settled_start is None or settled_end is None:
            return None
        start_id, end_id = settled_start.id, settled_end.id
    try:  # start 0: from before the first snapshot (an empty table), if none expired
        snaps = [get(i) for i in range(max(start_id, 0) + 1, end_id + 1)]
    except SnapshotNotFound:
        return None
    files: list[StoredChange] = []
    for snap in snaps:
        carries = _carries_changelog(producer, snap)
        if carries is None:
            return None
        if not carries or snap.changelog_manifest_list is None:
            continue
        for e in ctx.manifest_store.read_entries([snap.changelog_manifest_list]):
            files.append(StoredChange(snap.id, snap.barrier, e))
    return files


def _stored_changelog(ctx: TableContext, start: Snapshot, end: Snapshot) -> pa.Table | None:
    """Concatenated changelog files of (start, end]; None when they do not cover the range.

    Files are read in parallel threads (Parquet decoding releases the GIL) and
    concatenated in snapshot order.
    """
    files = stored_changelog_files(ctx, start.id, end.id)
    if files is None:
        return None
    target = ctx.schema.arrow_schema
    if not files:
        return with_row_kind(target.empty_table(), INSERT)
    parts = parallel_map(lambda f: read_changelog_file(ctx, f.entry, target), files)
    return pa.concat_tables(parts)


def table_changes(ctx: TableContext, start_snapshot_id: int, end_snapshot_id: int) -> pa.Table:
    """Rows that changed from start to end (exclusive start, inclusive end)."""
    if end_snapshot_id < start_snapshot_id:
        raise ValueError(
            f"end snapshot {end_snapshot_id} is before start snapshot {start_snapshot_id}"
        )
    start, end = (
        ctx.snapshot_manager.get(start_snapshot_id),
        ctx.snapshot_manager.get(end_snapshot_id),
    )
    if start.id == end.id:
        return with_row_kind(ctx.arrow_schema.empty_table(), INSERT)
    stored = _stored_changelog(ctx, start, end)
    if stored is not None:
        return stored
    if ctx.options.changelog_producer != "none":
        log.info(
            "table %s: snapshots %d..%d lack stored changelog; computing the diff",
            ctx.name,
            start.id,
            end.id,
        )
    return diff_snapshots(ctx, start, end)
