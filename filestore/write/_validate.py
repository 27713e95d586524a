"""Conform user data to a table schema before anything is buffered or written.

Every problem raises SchemaError naming the column, so a bad batch never
reaches a data file.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from filestore.errors import SchemaError
from filestore.format.row_kind import INSERT, ROW_KIND_COLUMN, UPDATE_AFTER, parse_row_kinds
from filestore.format.schema import TableSchema
from filestore.format.types import is_lossless_change


def _same_family(src: pa.DataType, dst: pa.DataType) -> bool:
    checks = (
        pa.types.is_integer,
        pa.types.is_floating,
        lambda t: (
            pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)
        ),
        lambda t: (
            pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)
        ),
        pa.types.is_timestamp,
        pa.types.is_decimal,
        lambda t: pa.types.is_date(t),
    )
    return any(c(src) and c(dst) for c in checks)


def _conform_column(name: str, col: pa.ChunkedArray, typ: pa.DataType) -> pa.ChunkedArray:
    if col.type == typ:
        return col
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
        if col.type == typ:
            return col
    if not (
        pa.types.is_null(col.type)
        or is_lossless_change(col.type, typ)
        or _same_family(col.type, typ)
        or (pa.types.is_integer(col.type) and pa.types.is_floating(typ))
    ):
        raise SchemaError(f"column {name!r} has type {col.type}, the table expects {typ}")
    try:
        return col.cast(typ, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SchemaError(
            f"column {name!r}: values do not fit the table's type {typ}: {e}"
        ) from None


def _first_null_row(col: pa.ChunkedArray, mask: np.ndarray | None = None) -> int | None:
    nulls = np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if mask is not None:
        nulls &= mask
    hits = np.flatnonzero(nulls)
    return int(hits[0]) if len(hits) else None


def conform(
    data: pa.Table | pa.RecordBatch, schema: TableSchema, table_name: str
) -> tuple[pa.Table, pa.Array]:
    """(data in the table's schema, int8 value kinds) or SchemaError naming the column."""
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if not isinstance(data, pa.Table):
        raise SchemaError(
            f"write() takes a pyarrow Table or RecordBatch, not {type(data).__name__}"
        )
    arrow = schema.arrow_schema
    names = data.column_names
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise SchemaError(f"column {dup!r} appears twice in the data")
    for name in names:
        if name != ROW_KIND_COLUMN and name not in arrow.names:
            raise SchemaError(
                f"column {name!r} is not in table {table_name} (columns: {', '.join(arrow.names)})"
            )
    n = data.num_rows
    if ROW_KIND_COLUMN in names:
        kinds = parse_row_kinds(data.column(ROW_KIND_COLUMN))
    else:
        kinds = pa.array(np.full(n, INSERT, dtype=np.int8))
    kinds_np = np.asarray(kinds.to_numpy(zero_copy_only=False))
    adds = (kinds_np == INSERT) | (kinds_np == UPDATE_AFTER)
    keys = set(schema.primary_key) | set(schema.partition_keys)
    columns = []
    for f in arrow:
        if f.name not in names:
            if f.name in keys:
                raise SchemaError(f"key column {f.name!r} is missing from the data")
            if not f.nullable:
                raise SchemaError(f"non-nullable column {f.name!r} is missing from the data")
            columns.append(pa.chunked_array([pa.nulls(n, f.type)]))
            continue
        col = _conform_column(f.name, data.column(f.name), f.type)
        if col.null_count:
            if f.name in schema.primary_key:
                row = _first_null_row(col)
                raise SchemaError(f"primary key column {f.name!r} is null at row {row}")
            if not f.nullable:  # retractions (-U/-D) may leave value columns null
                row = _first_null_row(col, adds)
                if row is not None:
                    raise SchemaError(f"non-nullable column {f.name!r} is null at row {row}")
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=arrow), kinds
