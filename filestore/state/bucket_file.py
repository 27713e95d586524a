"""The data and changelog files of one bucket: their schema, writing and reading them."""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from filestore.format.data_file import (
    DataFileMeta,
    FileSource,
    compute_value_stats,
    key_range_bytes,
    write_parquet,
)
from filestore.format.row_kind import INSERT, SEQUENCE_NUMBER, UPDATE_AFTER, VALUE_KIND
from filestore.format.schema import KEY_PREFIX, TableSchema
from filestore.state.context import Partition, TableContext


def is_data_file_changelog(file_name: str) -> bool:
    """Whether a changelog manifest entry names a data file rather than a changelog file:
    a commit whose rows were all new keys lists its data files as its changelog (every
    row +I) instead of writing a copy (``filestore.commit.lookup``)."""
    return file_name.startswith("data-")


def key_value_schema(schema: TableSchema) -> pa.Schema:
    """Columns of a primary-key data file: _KEY_*, _SEQUENCE_NUMBER, _VALUE_KIND, values."""
    arrow = schema.arrow_schema
    keys = [
        pa.field(KEY_PREFIX + k, arrow.field(k).type, nullable=False) for k in schema.primary_key
    ]
    system = [pa.field(SEQUENCE_NUMBER, pa.int64(), False), pa.field(VALUE_KIND, pa.int8(), False)]
    # values are nullable in files: retractions may carry only the key
    values = [f.with_nullable(True) for f in arrow]
    return pa.schema(keys + system + values)


def align(data: pa.Table, target: pa.Schema) -> pa.Table:
    """Columns in the target order and types; columns a file lacks become nulls."""
    arrays = []
    for f in target:
        if f.name in data.column_names:
            col = data.column(f.name)
            arrays.append(col if col.type == f.type else col.cast(f.type))
        else:
            arrays.append(pa.chunked_array([pa.nulls(data.num_rows, f.type)], type=f.type))
    return pa.Table.from_arrays(arrays, schema=target)


def read_bucket_file(
    ctx: TableContext, partition: Partition, bucket: int, f: DataFileMeta
) -> pa.Table:
    path = ctx.data_path(partition, bucket, f.file_name)
    with ctx.io.fs.open_input_file(path) as source:
        return pq.read_table(source)


def read_for_lookup(
    ctx: TableContext, partition: Partition, bucket: int, f: DataFileMeta
) -> pa.Table:
    """A data file a lookup reads, from the table handle's file cache when it is there
    (``filestore.io.file_cache``); kept there once read."""
    path = ctx.data_path(partition, bucket, f.file_name)
    cached = ctx.file_cache.get(path)
    if cached is not None:
        return cached
    data = read_bucket_file(ctx, partition, bucket, f)
    ctx.file_cache.put(path, data, ctx.options.lookup_cache_max_memory)
    return data


def write_bucket_file(
    ctx: TableContext,
    schema: TableSchema,
    partition: Partition,
    bucket: int,
    data: pa.Table,
    *,
    level: int,
    file_source: FileSource,
    prefix: str = "data",
) -> DataFileMeta:
    """Write one key-sorted (or append) table as a data/changelog file and describe it."""
    has_seq = SEQUENCE_NUMBER in data.column_names
    if has_seq and data.num_rows:
        mm = pc.min_max(data.column(SEQUENCE_NUMBER))
        min_seq, max_seq = int(mm["min"].as_py()), int(mm["max"].as_py())
    else:
        min_seq = max_seq = 0
    if schema.primary_key and VALUE_KIND in data.column_names:
        kinds = np.asarray(data.column(VALUE_KIND).to_numpy(zero_copy_only=False))
        deletes = int(((kinds != INSERT) & (kinds != UPDATE_AFTER)).sum())
        keys = [KEY_PREFIX + k for k in schema.primary_key]
        key_range = key_range_bytes(data.select(keys)) if prefix == "data" else b""
    else:
        deletes, key_range = 0, b""
    opts = schema.core_options
    name = f"{prefix}-{uuid.uuid4()}-0.parquet"
    path = ctx.paths.data_file(schema.partition_keys, partition, bucket, name)
    ctx.io.ensure_parent(path)
    with ctx.io.open_output(path) as out:
        pk = schema.primary_key
        # _VALUE_KIND: a handful of distinct bytes, smaller and faster without a dictionary
        sorted_columns = [*(KEY_PREFIX + k for k in pk), SEQUENCE_NUMBER, VALUE_KIND, *pk]
        footer = write_parquet(data, out, opts.file_compression, sorted_columns)
        size = out.tell()
    if prefix == "data" and schema.primary_key:
        # the commit's lookup reads it next (and later commits' lookups): as written
        ctx.file_cache.put(path, data, opts.lookup_cache_max_memory, written=True)
    stats, nulls = compute_value_stats(data, schema.column_names, footer)
    return DataFileMeta(
        file_name=name,
        file_size=size,
        row_count=data.num_rows,
        min_sequence_number=min_seq,
        max_sequence_number=max_seq,
        schema_id=schema.id,
        level=level,
        key_range=key_range,
        value_stats=stats,
        null_counts=nulls,
        delete_row_count=deletes,
        file_source=file_source,
    )
