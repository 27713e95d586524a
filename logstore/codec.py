"""debezium-json <-> Arrow, vectorized over batches.

Encoding turns each row into JSON with polars' ``struct.json_encode`` (Rust,
one pass per batch) and assembles the envelopes with Arrow string kernels.
Decoding joins the record values with newlines and parses them with
``pyarrow.json.read_json`` against an explicit envelope schema; only when a
batch fails to parse is it bisected to isolate the bad records.

JSON forms (Flink's JSON format where it has one): integers and floats as
numbers, decimals as strings (exact), strings as strings, binary as base64,
dates ``YYYY-MM-DD``, times ``HH:MM:SS[.f]``, timestamps without zone
``YYYY-MM-DD HH:MM:SS[.f]``, with zone ISO-8601 with offset, lists as arrays,
structs as objects. On read, decimals are also accepted as numbers,
timestamps with ``T`` or ``Z``, and a ``{"schema":…,"payload":…}`` envelope
(``debezium-json.schema-include``).

Row kinds: ``_row_kind`` holds Flink's short strings ``+I``, ``-U``, ``+U``,
``-D`` (what the decoder emits); the encoder also accepts int8 codes 0..3.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from logstore.errors import DecodeError, EncodeError
from logstore.markers import Headers, Marker, parse_marker
from logstore.spec import LogSpec

ROW_KINDS = ("+I", "-U", "+U", "-D")
INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = 0, 1, 2, 3
ROW_KIND = "_row_kind"
OPS = ("c", "r", "u", "d")
OP_C, OP_R, OP_U, OP_D = 0, 1, 2, 3

Bucketer = Callable[[pa.Table], Any]


class RawRecord(NamedTuple):
    """A Kafka record as any client hands it over."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = None
    timestamp_ms: int | None = None


# --------------------------------------------------------------------------- types


def _is_wire_converted(t: pa.DataType) -> bool:
    """Types the Arrow JSON reader cannot parse from our JSON form directly."""
    if pa.types.is_date(t) or pa.types.is_time(t):
        return True
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _is_wire_converted(t.value_type)
    if pa.types.is_struct(t):
        return any(_is_wire_converted(t.field(i).type) for i in range(t.num_fields))
    return False


def _wire_type(t: pa.DataType) -> pa.DataType:
    """The type the JSON reader parses a column as (strings where we convert afterwards)."""
    if pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_binary(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return pa.string()
    if pa.types.is_list(t):
        return pa.list_(_wire_type(t.value_type))
    if pa.types.is_large_list(t):
        return pa.large_list(_wire_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _wire_type(f.type)) for f in t])
    return t


def _needs_out_conversion(t: pa.DataType) -> bool:
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return True
    if pa.types.is_timestamp(t) and t.tz is not None and t.tz not in ("UTC", "+00:00"):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _needs_out_conversion(t.value_type)
    if pa.types.is_struct(t):
        return any(_needs_out_conversion(f.type) for f in t)
    return False


def _to_wire_expr(expr: pl.Expr, t: pa.DataType) -> pl.Expr:
    """polars expression turning a column into its JSON-ready form.

    Binary becomes base64; zoned timestamps are written in UTC, because polars prints
    offsets to the minute only and historic zones have second offsets (LMT).
    """
    if not _needs_out_conversion(t):
        return expr
    if pa.types.is_timestamp(t):
        return expr.dt.convert_time_zone("UTC")
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return expr.list.eval(_to_wire_expr(pl.element(), t.value_type))
    if pa.types.is_struct(t):
        fields = [_to_wire_expr(expr.struct.field(f.name), f.type).alias(f.name) for f in t]
        return pl.when(expr.is_null()).then(None).otherwise(pl.struct(fields))
    return expr.bin.encode("base64")


def _from_wire_expr(expr: pl.Expr, t: pa.DataType) -> pl.Expr:
    """polars expression turning a parsed JSON string form back into the column's type."""
    if not _is_wire_converted(t):
        return expr
    if pa.types.is_date(t):
        return expr.str.to_date("%Y-%m-%d", strict=True)
    if pa.types.is_time(t):
        return expr.str.to_time("%H:%M:%S%.f", strict=True)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return expr.list.eval(_from_wire_expr(pl.element(), t.value_type))
    if pa.types.is_struct(t):
        fields = [_from_wire_expr(expr.struct.field(f.name), f.type).alias(f.name) for f in t]
        return pl.when(expr.is_null()).then(None).otherwise(pl.struct(fields))
    return expr.str.decode("base64", strict=True)


def json_rows(table: pa.Table) -> pa.Array:
    """One JSON object text per row (string array), keys in column order."""
    if table.num_rows == 0:
        return pa.array([], pa.string())
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    exprs = [_to_wire_expr(pl.col(f.name), f.type).alias(f.name) for f in table.schema]
    out = df.select(pl.struct(exprs).struct.json_encode().alias("j")).to_arrow()
    return out.column("j").combine_chunks().cast(pa.string())


# --------------------------------------------------------------------------- encode


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


# --------------------------------------------------------------------------- decode


@dataclass(frozen=True)
class DecodeFailure:
    """A record that could not be decoded, with everything needed to dead-letter it."""

    partition: int
    offset: int
    reason: str
    key: bytes | None = None
    value: bytes | None = None
    headers: Headers = None


@dataclass
class Decoded:
    """Result of decoding a batch of raw records.

    ``table``: value columns + ``_row_kind`` + ``_partition`` + ``_offset`` in record order;
    ``markers``: barrier markers met; ``errors``: bad records (lenient mode only).
    """

    table: pa.Table
    markers: list[Marker] = field(default_factory=list)
    errors: list[DecodeFailure] = field(default_factory=list)


def output_schema(spec: LogSpec) -> pa.Schema:
    return pa.schema(
        [
            *spec.schema,
            pa.field(ROW_KIND, pa.string()),
            pa.field("_partition", pa.int32()),
            pa.field("_offset", pa.int64()),
        ]
    )


class _Schemas:
    """Per-spec parse schemas (cached on first use)."""

    def __init__(self, spec: LogSpec) -> None:
        self.spec = spec
        row = pa.struct([pa.field(f.name, _wire_type(f.type)) for f in spec.schema])
        env = [pa.field("before", row), pa.field("after", row), pa.field("op", pa.string())]
        self.envelope = pa.schema([*env, pa.field("payload", pa.struct(env))])
        self.key = pa.schema(
            [pa.field(c, _wire_type(spec.schema.field(c).type)) for c in spec.key_columns]
        )
        self.needs_conversion = any(_is_wire_converted(f.type) for f in spec.schema)
        # before/after images: absent images are null rows, so every field is nullable here
        self.images = pa.schema([f.with_nullable(True) for f in spec.schema])


_SCHEMAS: dict[int, _Schemas] = {}


def _schemas(spec: LogSpec) -> _Schemas:
    # keyed by id(spec) with the spec kept alive in the value, so never stale
    s = _SCHEMAS.get(id(spec))
    if s is None or s.spec is not spec:
        if len(_SCHEMAS) > 256:
            _SCHEMAS.clear()
        s = _SCHEMAS[id(spec)] = _Schemas(spec)
    return s


def _read_json(lines: Sequence[bytes], schema: pa.Schema) -> pa.Table:
    joined = b"\n".join(lines)
    multiline = joined.count(b"\n") != len(lines) - 1
    longest = max(len(v) for v in lines)
    table = pj.read_json(
        io.BytesIO(joined),
        read_options=pj.ReadOptions(block_size=max(1 << 20, 2 * longest + 64)),
        parse_options=pj.ParseOptions(
            explicit_schema=schema,
            unexpected_field_behavior="ignore",
            newlines_in_values=multiline,
        ),
    )
    if table.num_rows != len(lines):
        raise ValueError(f"expected {len(lines)} JSON objects, found {table.num_rows}")
    return table


def _struct_table(arr: pa.ChunkedArray, schema: pa.Schema) -> pa.Table:
    """A struct column as a table of its fields (nulls stay where the struct is null)."""
    flat = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    if isinstance(flat, pa.ChunkedArray):  # empty chunked array
        flat = pa.array([], flat.type)
    cols = flat.flatten()  # respects the parent's validity
    return pa.Table.from_arrays(cols, schema=pa.schema([pa.field(f.name, f.type) for f in schema]))


def _convert_from_wire(table: pa.Table, spec: LogSpec) -> pa.Table:
    """Wire forms (strings for dates/times/binary) -> the table's types; raises on bad values."""
    s = _schemas(spec)
    if s.needs_conversion and table.num_rows:
        df = pl.from_arrow(table)
        assert isinstance(df, pl.DataFrame)
        exprs = [_from_wire_expr(pl.col(f.name), f.type).alias(f.name) for f in spec.schema]
        table = df.select(exprs).to_arrow()
    return table.cast(s.images)


@dataclass
class _Part:
    """Decoded slice [lo, hi) of the data records; failures carry a reason instead."""

    lo: int
    hi: int
    op: np.ndarray | None = None  # int8 op codes; -1 = semantic error
    has_before: np.ndarray | None = None
    before: pa.Table | None = None
    after: pa.Table | None = None
    reasons: dict[int, str] = field(default_factory=dict)  # record index -> reason


def _decode_slice(
    values: list[bytes], keys: list[bytes | None], lo: int, hi: int, spec: LogSpec
) -> _Part:
    s = _schemas(spec)
    env = _read_json(values[lo:hi], s.envelope)
    payload = env.column("payload").combine_chunks()
    use_payload = payload.is_valid()
    parts = {}
    for name in ("before", "after", "op"):
        top = env.column(name).combine_chunks()
        if payload.null_count < len(payload):  # schema-include envelopes
            top = pc.if_else(use_payload, payload.field(name), top)
        parts[name] = top
    n = hi - lo
    op_idx = pc.index_in(parts["op"], value_set=pa.array(OPS))
    op = np.asarray(pc.fill_null(op_idx, -1).to_numpy(zero_copy_only=False), dtype=np.int8)
    has_before = np.asarray(parts["before"].is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    has_after = np.asarray(parts["after"].is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    before = _struct_table(parts["before"], s.envelope.field("before").type)
    after = _struct_table(parts["after"], s.envelope.field("after").type)

    # key-only deletes: a "d" without before takes its key fields from the Kafka key
    key_only = np.flatnonzero((op == OP_D) & ~has_before)
    key_ok = np.zeros(n, dtype=bool)
    if key_only.size:
        with_key = [i for i in key_only if keys[lo + i]]
        if with_key:
            kt = _read_json([keys[lo + i] for i in with_key], s.key)  # type: ignore[misc]
            full = pa.table(
                {
                    f.name: kt.column(f.name)
                    if f.name in kt.column_names
                    else pa.nulls(len(with_key), f.type)
                    for f in s.envelope.field("before").type
                }
            )
            idx = np.arange(n)
            idx[with_key] = n + np.arange(len(with_key))
            before = pa.concat_tables([before, full]).take(pa.array(idx))
            key_ok[with_key] = True
            has_before = has_before | key_ok

    before = _convert_from_wire(before, spec)
    after = _convert_from_wire(after, spec)

    reasons: dict[int, str] = {}
    bad = op < 0
    for i in np.flatnonzero(bad):
        reasons[int(i)] = f"unknown op {parts['op'][int(i)].as_py()!r}"
    needs_after = (op == OP_C) | (op == OP_R) | (op == OP_U)
    for i in np.flatnonzero(needs_after & ~has_after & ~bad):
        reasons[int(i)] = f"op {OPS[op[i]]!r} without 'after'"
    if spec.effective_changelog_mode == "all":
        for i in np.flatnonzero((op == OP_U) & ~has_before):
            reasons.setdefault(int(i), "op 'u' without 'before' (log.changelog-mode=all needs it)")
    for i in np.flatnonzero((op == OP_D) & ~has_before):
        reasons.setdefault(int(i), "op 'd' without 'before' and without a key")
    if spec.primary_key:
        checks = [
            (needs_after & has_after, after, "after"),
            ((op == OP_D) & has_before, before, "before"),
        ]
        for mask, image, label in checks:
            for col in spec.primary_key:
                nulls = np.asarray(
                    image.column(col).is_null().to_numpy(zero_copy_only=False), dtype=bool
                )
                for i in np.flatnonzero(mask & nulls):
                    reasons.setdefault(int(i), f"key field {col!r} missing or null in {label!r}")
    if reasons:
        op = op.copy()
        op[list(reasons)] = -1
    return _Part(lo, hi, op, has_before, before, after, {lo + i: r for i, r in reasons.items()})


def _failure_reason(value: bytes, exc: Exception) -> str:
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as jexc:
        return f"invalid JSON: {jexc}"
    if not isinstance(doc, dict):
        return f"value is a JSON {type(doc).__name__}, not a debezium envelope object"
    return f"wrong type: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}"


def _decode_isolating(
    values: list[bytes], keys: list[bytes | None], lo: int, hi: int, spec: LogSpec
) -> list[_Part]:
    """Decode [lo, hi); on failure bisect so only the bad records are lost."""
    try:
        return [_decode_slice(values, keys, lo, hi, spec)]
    except (pa.ArrowException, ValueError, pl.exceptions.PolarsError) as exc:
        if hi - lo == 1:
            return [_Part(lo, hi, reasons={lo: _failure_reason(values[lo], exc)})]
    mid = (lo + hi) // 2
    return _decode_isolating(values, keys, lo, mid, spec) + _decode_isolating(
        values, keys, mid, hi, spec
    )


def _assemble(
    parts: list[_Part], spec: LogSpec, partitions: np.ndarray, offsets: np.ndarray
) -> pa.Table:
    """Turn decoded records into rows: c/r -> +I, u -> -U,+U, d -> -D."""
    good = [p for p in parts if p.op is not None]
    if not good:
        return output_schema(spec).empty_table()
    op = np.concatenate([p.op for p in good])  # type: ignore[misc]
    has_before = np.concatenate([p.has_before for p in good])  # type: ignore[misc]
    rec_ids = np.concatenate([np.arange(p.lo, p.hi) for p in good])
    before = pa.concat_tables([p.before for p in good])  # type: ignore[misc]
    after = pa.concat_tables([p.after for p in good])  # type: ignore[misc]
    n = len(op)
    two = (op == OP_U) & has_before
    counts = np.where(op < 0, 0, np.where(two, 2, 1))
    rec = np.repeat(np.arange(n), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    pos = np.arange(len(rec)) - first
    rop = op[rec]
    use_before = (rop == OP_D) | (two[rec] & (pos == 0))
    kind = np.where(
        rop == OP_D,
        DELETE,
        np.where(rop == OP_U, np.where(use_before, UPDATE_BEFORE, UPDATE_AFTER), INSERT),
    )
    rows = pa.concat_tables([before, after]).take(pa.array(np.where(use_before, rec, rec + n)))
    rows = rows.cast(spec.schema)  # back to the table's nullability (key fields checked above)
    rid = rec_ids[rec]
    return (
        rows.append_column(
            pa.field(ROW_KIND, pa.string()), pc.take(pa.array(ROW_KINDS), pa.array(kind))
        )
        .append_column(pa.field("_partition", pa.int32()), pa.array(partitions[rid], pa.int32()))
        .append_column(pa.field("_offset", pa.int64()), pa.array(offsets[rid], pa.int64()))
    )


def decode_columns(
    spec: LogSpec,
    partitions: Sequence[int],
    offsets: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Headers],
    lenient: bool = False,
    topic: str | None = None,
) -> Decoded:
    """Decode parallel record columns (the fast path used by LogReader)."""
    topic = topic or spec.topic
    markers: list[Marker] = []
    errors: list[DecodeFailure] = []
    data_idx: list[int] = []
    for i, v in enumerate(values):
        if v is not None:
            data_idx.append(i)
            continue
        try:
            m = parse_marker(partitions[i], offsets[i], headers[i])
        except ValueError as exc:
            errors.append(
                DecodeFailure(
                    partitions[i],
                    offsets[i],
                    f"bad dts.barrier header: {exc}",
                    keys[i],
                    None,
                    headers[i],
                )
            )
            continue
        if m is not None:
            markers.append(m)
        # else: a Kafka tombstone, skipped as DESIGN.md says
    part_arr = (
        np.asarray(partitions, dtype=np.int64)[data_idx] if data_idx else np.zeros(0, np.int64)
    )
    off_arr = np.asarray(offsets, dtype=np.int64)[data_idx] if data_idx else np.zeros(0, np.int64)
    data_values: list[bytes] = [values[i] for i in data_idx]  # type: ignore[misc]
    data_keys = [keys[i] for i in data_idx]
    parts = (
        _decode_isolating(data_values, data_keys, 0, len(data_values), spec) if data_values else []
    )
    for p in parts:
        for j, reason in p.reasons.items():
            i = data_idx[j]
            errors.append(
                DecodeFailure(partitions[i], offsets[i], reason, keys[i], values[i], headers[i])
            )
    if errors and not lenient:
        first = min(errors, key=lambda e: (e.partition, e.offset))
        raise DecodeError(topic, first.partition, first.offset, first.reason)
    errors.sort(key=lambda e: (e.partition, e.offset))
    return Decoded(_assemble(parts, spec, part_arr, off_arr), markers, errors)


def decode_records(
    records: Sequence[RawRecord | tuple[Any, ...]], spec: LogSpec, lenient: bool = False
) -> Decoded:
    """Decode raw records ``(partition, offset, key, value, headers[, timestamp_ms])``.

    Client-independent: the Faust worker passes what Faust gives it, the reader what
    confluent-kafka gives it. Non-lenient mode raises DecodeError on the first bad record.
    """
    if not records:
        return Decoded(output_schema(spec).empty_table())
    cols = list(zip(*records, strict=False))
    return decode_columns(spec, cols[0], cols[1], cols[2], cols[3], cols[4], lenient)
