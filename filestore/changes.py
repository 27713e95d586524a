"""Changelog reads: the rows that changed between two snapshots, with ``_row_kind``.

Table option ``changelog-producer`` decides where the changes come from:

- ``none``: computed on read. The buckets whose files differ between the two
  snapshots are read at both and diffed by primary key (-D, +I, -U/+U pairs),
  so the result is the net change and is right across compactions, which
  change files but not rows. Needs only the two snapshots.
- ``input``: the writer stores its input rows (before merging) as changelog
  files; changes() concatenates those of every snapshot in (start, end].
- ``lookup``: the committer looks up the current value of every key a commit
  writes (in the snapshot it commits on top of, recomputed if it has to retry)
  and stores the exact -U/+U, +I, -D as changelog files.

With ``input``/``lookup``, a range that holds a snapshot without changelog
(written before the option was set, or an OVERWRITE) falls back to the diff.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import pyarrow as pa

from filestore.compaction import align, key_value_schema, read_bucket_file, write_bucket_file
from filestore.errors import SnapshotNotFound
from filestore.merge import merge
from filestore.messages import CommitMessage
from filestore.read import SplitReader
from filestore.row_kind import (
    DELETE,
    INSERT,
    ROW_KIND_COLUMN,
    SEQUENCE_NUMBER,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    VALUE_KIND,
    kinds_to_strings,
)
from filestore.scan import Split, TableScan
from filestore.schema import KEY_PREFIX
from filestore.snapshot import APPEND, COMPACT, OVERWRITE, Snapshot

if TYPE_CHECKING:
    from filestore.table import Table

log = logging.getLogger(__name__)

_O, _N = "__dts_old", "__dts_new"


def _with_kind(data: pa.Table, kind: int) -> pa.Table:
    codes = pa.array(np.full(data.num_rows, kind, dtype=np.int8))
    return data.append_column(ROW_KIND_COLUMN, kinds_to_strings(codes))


def _frame(data: pa.Table, index: str) -> pl.DataFrame:
    frame = pl.from_arrow(data, rechunk=False)
    assert isinstance(frame, pl.DataFrame)
    return frame.with_row_index(index)


def diff_states(old: pa.Table, new: pa.Table, key_columns: Sequence[str]) -> pa.Table:
    """-D for keys only in old, +I for keys only in new, -U/+U pairs for changed rows."""
    schema = new.schema
    keys = list(key_columns)
    o = _frame(old, _O).select([*keys, _O])
    n = _frame(new, _N).select([*keys, _N])
    joined = o.join(n, on=keys, how="full", coalesce=True, nulls_equal=True)
    oi, ni = joined[_O], joined[_N]
    gone = joined.filter(ni.is_null())[_O].to_numpy()
    born = joined.filter(oi.is_null())[_N].to_numpy()
    both = joined.filter(oi.is_not_null() & ni.is_not_null())
    bo, bn = both[_O].to_numpy(), both[_N].to_numpy()
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
    pairs = pa.concat_tables([_with_kind(before, UPDATE_BEFORE), _with_kind(after, UPDATE_AFTER)])
    interleave = np.empty(2 * m, dtype=np.int64)
    interleave[0::2], interleave[1::2] = np.arange(m), np.arange(m) + m
    parts = [
        _with_kind(old.take(pa.array(gone)), DELETE),
        _with_kind(new.take(pa.array(born)), INSERT),
        pairs.take(pa.array(interleave)),
    ]
    return pa.concat_tables(parts)


def diff_multisets(old: pa.Table, new: pa.Table) -> pa.Table:
    """Append-only tables: rows only in old (-D) or only in new (+I), counting duplicates."""
    cols = old.column_names
    occ = "__dts_occurrence"

    def numbered(t: pa.Table, index: str) -> pl.DataFrame:
        f = _frame(t, index)
        return f.with_columns(pl.int_range(pl.len()).over(cols).alias(occ))

    o, n = numbered(old, _O), numbered(new, _N)
    on = [*cols, occ]
    gone = o.join(n, on=on, how="anti", nulls_equal=True)[_O].to_numpy()
    born = n.join(o, on=on, how="anti", nulls_equal=True)[_N].to_numpy()
    return pa.concat_tables(
        [
            _with_kind(old.take(pa.array(gone)), DELETE),
            _with_kind(new.take(pa.array(born)), INSERT),
        ]
    )


def _splits(table: Table, snap: Snapshot) -> dict[tuple[tuple[str | None, ...], int], Split]:
    return {(s.partition_values, s.bucket): s for s in TableScan(table, snap).plan()}


def _read(table: Table, reader: SplitReader, split: Split | None) -> pa.Table:
    if split is None:
        return reader.output_schema().empty_table()
    batches = list(table.read_split(split))
    return pa.Table.from_batches(batches, schema=reader.output_schema())


def _names(split: Split | None) -> set[str]:
    return {f.file_name for f in split.files} if split is not None else set()


def diff_snapshots(table: Table, start: Snapshot, end: Snapshot) -> pa.Table:
    """The net change from start to end, bucket by bucket (unchanged buckets are skipped)."""
    schema = table.schema
    reader = SplitReader(table, schema)
    old_splits, new_splits = _splits(table, start), _splits(table, end)
    parts = []
    for key in sorted(set(old_splits) | set(new_splits), key=lambda k: (str(k[0]), k[1])):
        a, b = old_splits.get(key), new_splits.get(key)
        same = a is not None and b is not None and _names(a) == _names(b)
        if same:
            continue
        old, new = _read(table, reader, a), _read(table, reader, b)
        if schema.primary_key:
            parts.append(diff_states(old, new, schema.primary_key))
        else:
            parts.append(diff_multisets(old, new))
    if not parts:
        return _with_kind(reader.output_schema().empty_table(), INSERT)
    return pa.concat_tables(parts)


def _stored_changelog(table: Table, snaps: Sequence[Snapshot]) -> pa.Table | None:
    """Concatenated changelog files of the snapshots; None if one of them lacks its changelog."""
    schema = table.schema
    target = schema.arrow_schema
    parts = []
    for snap in snaps:
        if snap.commit_kind == COMPACT:
            continue  # compaction changes files, not rows
        if snap.commit_kind == OVERWRITE:
            return None  # its input rows omit the rows it replaced: diff instead
        if snap.changelog_manifest_list is None:
            if snap.commit_kind != APPEND or snap.delta_record_count != 0:
                return None
            continue
        for e in table.manifest_store.read_entries([snap.changelog_manifest_list]):
            data = read_bucket_file(table, e.partition, e.bucket, e.file)
            if SEQUENCE_NUMBER in data.column_names and not schema.primary_key:
                data = data.drop_columns([SEQUENCE_NUMBER])
            kinds = (
                data.column(VALUE_KIND)
                if VALUE_KIND in data.column_names
                else pa.array(np.full(data.num_rows, INSERT, dtype=np.int8))
            )
            rows = align(data, target)
            parts.append(rows.append_column(ROW_KIND_COLUMN, kinds_to_strings(kinds)))
    if not parts:
        return _with_kind(target.empty_table(), INSERT)
    return pa.concat_tables(parts)


def table_changes(table: Table, start_snapshot_id: int, end_snapshot_id: int) -> pa.Table:
    """Rows that changed from start to end (exclusive start, inclusive end)."""
    if end_snapshot_id < start_snapshot_id:
        raise ValueError(
            f"end snapshot {end_snapshot_id} is before start snapshot {start_snapshot_id}"
        )
    start, end = table.snapshot(start_snapshot_id), table.snapshot(end_snapshot_id)
    if start.id == end.id:
        return _with_kind(table.arrow_schema.empty_table(), INSERT)
    if table.options.changelog_producer != "none":
        try:
            snaps = [table.snapshot(i) for i in range(start.id + 1, end.id + 1)]
        except SnapshotNotFound:
            snaps = None
        stored = _stored_changelog(table, snaps) if snaps is not None else None
        if stored is not None:
            return stored
        log.info(
            "table %s: snapshots %d..%d lack stored changelog; computing the diff",
            table.name,
            start.id,
            end.id,
        )
    return diff_snapshots(table, start, end)


# -- changelog-producer=lookup ------------------------------------------------
def _as_kv(values: pa.Table, schema_kv: pa.Schema, keys: Sequence[str], seq: int) -> pa.Table:
    """Current rows as key-value rows older than anything a writer adds (sequence ``seq``)."""
    n = values.num_rows
    arrays = {KEY_PREFIX + k: values.column(k) for k in keys}
    arrays[SEQUENCE_NUMBER] = pa.array(np.full(n, seq, dtype=np.int64))
    arrays[VALUE_KIND] = pa.array(np.full(n, INSERT, dtype=np.int8))
    for c in values.column_names:
        arrays[c] = values.column(c)
    return align(pa.table(arrays), schema_kv)


def lookup_changelog(
    table: Table, latest: Snapshot | None, messages: Sequence[CommitMessage]
) -> list[CommitMessage]:
    """Messages with changelog files computed against the state at ``latest``."""
    schema = table.schema
    if not schema.primary_key:
        return list(messages)
    keys = list(schema.primary_key)
    kv = key_value_schema(schema)
    kv_keys = [KEY_PREFIX + k for k in keys]
    reader = SplitReader(table, schema)
    current = _splits(table, latest) if latest is not None else {}
    out = []
    for m in messages:
        if not m.new_files:
            out.append(m)
            continue
        files = sorted(m.new_files, key=lambda f: f.min_sequence_number)
        written = pa.concat_tables(
            [align(read_bucket_file(table, m.partition, m.bucket, f), kv) for f in files]
        )
        old_all = _read(table, reader, current.get((m.partition, m.bucket)))
        touched = pl.from_arrow(written.select(kv_keys))
        assert isinstance(touched, pl.DataFrame)
        touched = touched.rename(dict(zip(kv_keys, keys, strict=True))).unique()
        old_frame = _frame(old_all, _O)
        hit = old_frame.join(touched, on=keys, how="semi", nulls_equal=True)[_O].to_numpy()
        old = old_all.take(pa.array(hit))
        low = min(f.min_sequence_number for f in files) - 1
        merged = merge(
            pa.concat_tables([_as_kv(old, kv, keys, low), written]),
            kv_keys,
            schema.core_options,
            drop_deletes=True,
        )
        new = align(merged.select(schema.column_names), old.schema)
        changes = diff_states(old, new, keys)
        if changes.num_rows == 0:
            out.append(m)
            continue
        meta = write_bucket_file(
            table,
            schema,
            m.partition,
            m.bucket,
            _changelog_kv(changes, kv, keys, low + 1),
            level=0,
            file_source=APPEND,
            prefix="changelog",
        )
        out.append(
            CommitMessage(
                m.partition,
                m.bucket,
                m.total_buckets,
                m.new_files,
                m.deleted_files,
                (*m.changelog_files, meta),
            )
        )
    return out


def _changelog_kv(changes: pa.Table, kv: pa.Schema, keys: Sequence[str], seq: int) -> pa.Table:
    from filestore.row_kind import parse_row_kinds

    kinds = parse_row_kinds(changes.column(ROW_KIND_COLUMN))
    values = changes.drop_columns([ROW_KIND_COLUMN])
    data = _as_kv(values, kv, keys, seq)
    return data.set_column(data.schema.get_field_index(VALUE_KIND), VALUE_KIND, kinds)
