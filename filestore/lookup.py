"""changelog-producer=lookup: the changelog a compaction of level-0 files produces.

As in Paimon's lookup compaction: level-0 files hold what writers committed
since the bucket was last compacted, and the levels above hold the state
before them. For every key the level-0 files touch, the compaction looks up
the key's value in the levels above (old), merges the level-0 rows onto it with
the table's merge engine (new), and stores the difference (+I, -U/+U, -D) as a
changelog file of its COMPACT snapshot. Level-0 files of several commits
compacted together give their net change per key. With auto-compaction on
(the default) every commit is followed by such a compaction, so each commit's
changes are stored right after it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from filestore.bucket_file import align, key_value_schema, read_bucket_file, write_bucket_file
from filestore.changes import diff_states, indexed_frame, read_state
from filestore.context import Partition, TableContext
from filestore.data_file import DataFileMeta, FileSource
from filestore.merge import merge
from filestore.read import SplitReader
from filestore.row_kind import INSERT, ROW_KIND_COLUMN, SEQUENCE_NUMBER, VALUE_KIND, parse_row_kinds
from filestore.scan import Split
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


def _state_of(
    ctx: TableContext, partition: Partition, bucket: int, files: Sequence[DataFileMeta]
) -> pa.Table:
    """The merged rows of the given files of one bucket."""
    schema = ctx.schema
    split = Split(0, dict(zip(schema.partition_keys, partition, strict=True)), bucket, tuple(files))
    return read_state(SplitReader(ctx, schema), split if files else None)


def _rows_with_keys(rows: pa.Table, touched: pa.Table, keys: list[str]) -> pa.Table:
    probe = pl.from_arrow(touched, rechunk=False)
    assert isinstance(probe, pl.DataFrame)
    frame = indexed_frame(rows, _ROW)
    hit = frame.join(probe, on=keys, how="semi", nulls_equal=True)[_ROW].to_numpy()
    return rows.take(pa.array(hit))


def lookup_changelog(
    ctx: TableContext,
    partition: Partition,
    bucket: int,
    level0: Sequence[DataFileMeta],
    upper: Sequence[DataFileMeta],
) -> DataFileMeta | None:
    """The changelog file of compacting ``level0`` over ``upper`` (every file of the
    bucket above level 0); None when the level-0 rows change nothing."""
    schema = ctx.schema
    keys = list(schema.primary_key)
    kv = key_value_schema(schema)
    kv_keys = [KEY_PREFIX + k for k in keys]
    files = sorted(level0, key=lambda f: f.min_sequence_number)
    written = pa.concat_tables(
        [align(read_bucket_file(ctx, partition, bucket, f), kv) for f in files]
    )
    touched = written.select(kv_keys).rename_columns(keys)
    old = _rows_with_keys(_state_of(ctx, partition, bucket, upper), touched, keys)
    # the old rows are older than every level-0 row
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
        return None
    data = _as_kv(changes.drop_columns([ROW_KIND_COLUMN]), kv, keys, low + 1)
    kinds = parse_row_kinds(changes.column(ROW_KIND_COLUMN))
    data = data.set_column(data.schema.get_field_index(VALUE_KIND), VALUE_KIND, kinds)
    return write_bucket_file(
        ctx,
        schema,
        partition,
        bucket,
        data,
        level=0,
        file_source=FileSource.COMPACT,
        prefix="changelog",
    )
