"""Arrow -> debezium-json records, vectorized over batches.

Each row becomes JSON with polars' ``struct.json_encode`` (Rust, one pass per batch)
and the envelopes are assembled with Arrow string kernels. The JSON forms and row
kinds are described in ``logstore.codec`` (the decoder, and the wire constants both
sides share).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from logstore.codec import (
    DELETE,
    OP_C,
    OP_D,
    OP_U,
    OPS,
    ROW_KINDS,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    Bucketer,
)
from logstore.errors import EncodeError
from logstore.spec import ROW_KIND, LogSpec
from logstore.wire import polars_safe_type, to_wire_expr


def json_rows(table: pa.Table) -> pa.Array:
    """One JSON object text per row (string array), keys in column order."""
    if table.num_rows == 0:
        return pa.array([], pa.string())
    safe = pa.schema([f.with_type(polars_safe_type(f.type)) for f in table.schema])
    if safe != table.schema:
        table = table.cast(safe)
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    exprs = [to_wire_expr(pl.col(f.name), f.type).alias(f.name) for f in table.schema]
    out = df.select(pl.struct(exprs).struct.json_encode().alias("j")).to_arrow()
    return out.column("j").combine_chunks().cast(pa.string())


@dataclass
class EncodedBatch:
    """Kafka records ready to produce: parallel keys, values and partitions."""

    keys: pa.Array
    values: pa.Array
    partitions: np.ndarray

    def __len__(self) -> int:
        return len(self.values)


def row_kind_codes(table: pa.Table) -> np.ndarray:
    """``_row_kind`` as int8 codes 0..3 (+I when the column is absent)."""
    if ROW_KIND not in table.column_names:
        return np.zeros(table.num_rows, dtype=np.int8)
    col = table.column(ROW_KIND)
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if pa.types.is_integer(col.type):
        codes = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64)
        if col.null_count or (codes.size and (codes.min() < 0 or codes.max() > 3)):
            raise EncodeError("_row_kind codes must be 0..3 (+I, -U, +U, -D) and not null")
        return codes.astype(np.int8)
    idx = pc.index_in(col, value_set=pa.array(ROW_KINDS))
    if idx.null_count:
        bad = pc.filter(col, idx.is_null()).unique().to_pylist()[:5]
        raise EncodeError(f"_row_kind must be one of {ROW_KINDS}, got {bad}")
    return np.asarray(idx.to_numpy(zero_copy_only=False), dtype=np.int8)


def _conform(table: pa.Table | pa.RecordBatch, spec: LogSpec) -> pa.Table:
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    missing = [n for n in spec.schema.names if n not in table.column_names]
    if missing:
        raise EncodeError(f"{spec.topic}: rows lack columns {missing}")
    data = table.select(spec.schema.names)
    if data.schema != spec.schema:
        try:
            data = data.cast(spec.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise EncodeError(f"{spec.topic}: rows do not fit the table schema: {exc}") from exc
    for f in spec.schema:
        if pa.types.is_floating(f.type):
            col = data.column(f.name)
            bad = pc.sum(pc.invert(pc.is_finite(col))).as_py()
            if bad:
                raise EncodeError(
                    f"{spec.topic}: column {f.name!r} holds {bad} NaN/Infinity values, "
                    "which JSON cannot carry"
                )
    return data


def _record_plan(kinds: np.ndarray, keys_json: pa.Array, mode: str) -> tuple[np.ndarray, ...]:
    """Per Kafka record: row index, op code, before row index, after row index (-1 = none)."""
    n = len(kinds)
    if mode == "upsert":
        rec = np.flatnonzero(kinds != UPDATE_BEFORE)
        k = kinds[rec]
        op = np.where(k == DELETE, OP_D, OP_C).astype(np.int8)
        before = np.where(op == OP_D, rec, -1)
        after = np.where(op == OP_C, rec, -1)
        return rec, op, before, after
    # all: a -U immediately followed by a +U of the same key becomes one real "u"
    pair = np.zeros(n, dtype=bool)
    if n > 1:
        same_key = np.asarray(
            pc.equal(keys_json.slice(0, n - 1), keys_json.slice(1)).to_numpy(zero_copy_only=False),
            dtype=bool,
        )
        pair[:-1] = (kinds[:-1] == UPDATE_BEFORE) & (kinds[1:] == UPDATE_AFTER) & same_key
    second = np.zeros(n, dtype=bool)
    second[1:] = pair[:-1]
    rec = np.flatnonzero(~second)
    k = kinds[rec]
    is_u = pair[rec]
    is_d = ~is_u & ((k == UPDATE_BEFORE) | (k == DELETE))
    op = np.where(is_u, OP_U, np.where(is_d, OP_D, OP_C)).astype(np.int8)
    before = np.where(is_u | is_d, rec, -1)
    after = np.where(is_u, rec + 1, np.where(is_d, -1, rec))
    return rec, op, before, after


def _take_or_null(arr: pa.Array, idx: np.ndarray) -> pa.Array:
    indices = pa.array(idx, type=pa.int64(), mask=idx < 0)
    return pc.fill_null(pc.take(arr, indices), "null")


def encode_batch(
    table: pa.Table | pa.RecordBatch,
    spec: LogSpec,
    bucketer: Bucketer,
    ts_ms: int = 0,
) -> EncodedBatch:
    """Encode rows (with optional ``_row_kind``) into debezium-json Kafka records.

    Partition = ``bucketer(rows)`` (the FileStore bucket of each row's key).
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    kinds = row_kind_codes(table)
    data = _conform(table, spec)
    if data.num_rows == 0:
        empty = pa.array([], pa.string())
        return EncodedBatch(empty, empty, np.zeros(0, dtype=np.int32))
    rows = json_rows(data)
    keys = json_rows(data.select(spec.key_columns)) if spec.primary_key else rows
    parts = np.asarray(bucketer(data), dtype=np.int64)
    if parts.shape != (data.num_rows,) or parts.min() < 0 or parts.max() >= spec.buckets:
        raise EncodeError(
            f"{spec.topic}: the bucketer returned bucket ids outside 0..{spec.buckets - 1} "
            f"or of the wrong length"
        )
    rec, op, before, after = _record_plan(kinds, keys, spec.effective_changelog_mode)
    op_text = pc.take(pa.array(OPS), pa.array(op))
    suffix = (
        '","ts_ms":'
        + str(ts_ms)
        + ',"source":{"connector":"dts","name":'
        + orjson.dumps(spec.topic).decode()
        + ',"ts_ms":'
        + str(ts_ms)
        + "}}"
    )
    values = pc.binary_join_element_wise(
        '{"before":',
        _take_or_null(rows, before),
        ',"after":',
        _take_or_null(rows, after),
        ',"op":"',
        op_text,
        suffix,
        "",
    )
    rec_idx = pa.array(rec)
    return EncodedBatch(
        keys=pc.take(keys, rec_idx),
        values=values,
        partitions=parts[rec].astype(np.int32),
    )
