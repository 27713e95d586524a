"""Debezium's own value forms on read: temporal integers and base64 decimals.

A real Debezium connector (default settings) does not write our ISO strings:
dates are epoch days, times and timestamps integers in ms/us/ns (the
``io.debezium.time.*`` semantic types), decimals base64 big-endian unscaled
bytes (``org.apache.kafka.connect.data.Decimal``). A *plan* says, per top-level
column, which of those forms a batch uses:

- with ``debezium-json.schema-include`` (``{"schema":…,"payload":…}``) the
  schema's semantic type of each field decides (units from the type name,
  decimal scale from its parameters);
- without a schema, by the column's type: an integer where a date is expected
  is epoch days; where a time, timestamp or duration is expected, a count of
  the column's own unit (epoch millis for ``timestamp[ms]``, micros for
  ``timestamp[us]``). Decimals are base64 only when a schema says so.

The reader tries the plan that worked last for the table, and only when a
batch fails to parse looks at its first records (``probe_plan``) to pick
another; a batch whose records disagree (different schemas) fails and is
bisected like any bad batch, so each part is read with its own plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import WireValueError
from logstore.spec import DecimalMode


@dataclass(frozen=True)
class ColumnForm:
    """How one column's values travel when not in our ISO form.

    ``kind="int"``: an integer count of ``unit`` (``"D"`` = days); ``kind="b64dec"``:
    base64 of the big-endian two's-complement unscaled value with ``scale``;
    ``kind="numdec"``: a JSON number (Kafka's JsonConverter with ``decimal.format=NUMERIC``),
    parsed straight into the column's decimal type: exact, and refused when it needs more
    digits than the column has.
    """

    kind: str
    unit: str | None = None
    scale: int | None = None


#: Plan: (column, form) pairs, sorted; columns not named use our ISO forms.
Plan = tuple[tuple[str, ColumnForm], ...]
DEFAULT_PLAN: Plan = ()

DECIMAL_SEMANTIC = "org.apache.kafka.connect.data.Decimal"
SEMANTIC_UNITS = {
    "io.debezium.time.Date": "D",
    "org.apache.kafka.connect.data.Date": "D",
    "io.debezium.time.Time": "ms",
    "org.apache.kafka.connect.data.Time": "ms",
    "io.debezium.time.MicroTime": "us",
    "io.debezium.time.NanoTime": "ns",
    "io.debezium.time.Timestamp": "ms",
    "org.apache.kafka.connect.data.Timestamp": "ms",
    "io.debezium.time.MicroTimestamp": "us",
    "io.debezium.time.NanoTimestamp": "ns",
    "io.debezium.time.MicroDuration": "us",
}
_CONNECT_INTS = ("int8", "int16", "int32", "int64")

#: What pyarrow parses a Debezium ``schema`` object as (other keys are ignored).
SCHEMA_PARSE_TYPE = pa.struct(
    [
        pa.field(
            "fields",
            pa.list_(
                pa.struct(
                    [
                        pa.field("field", pa.string()),
                        pa.field(
                            "fields",
                            pa.list_(
                                pa.struct(
                                    [
                                        pa.field("field", pa.string()),
                                        pa.field("name", pa.string()),
                                        pa.field("type", pa.string()),
                                        pa.field("parameters", pa.struct([("scale", pa.string())])),
                                    ]
                                )
                            ),
                        ),
                    ]
                )
            ),
        )
    ]
)

Semantic = tuple[str | None, str | None, str | None]  # (name, type, scale)


def is_temporal(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_date(t)
        or pa.types.is_time(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_duration(t)
    )


def default_unit(t: pa.DataType) -> str:
    """Unit of a bare integer in a temporal column (the rule without a schema)."""
    return "D" if pa.types.is_date(t) else str(t.unit)


def parse_type(t: pa.DataType, form: ColumnForm) -> pa.DataType:
    if form.kind == "numdec":
        return t
    return pa.int64() if form.kind == "int" else pa.string()


# --------------------------------------------------------------------------- plans


def plan_from_semantics(
    schema: pa.Schema, semantics: Mapping[str, Semantic], numbers: Iterable[str] = ()
) -> Plan:
    """The plan a batch's Debezium schemas give; ``numbers``: decimal columns whose values
    are JSON numbers (``json_number_fields``)."""
    numeric = set(numbers)
    forms: dict[str, ColumnForm] = {}
    for name, (sem, typ, scale) in semantics.items():
        if name not in schema.names:
            continue
        t = schema.field(name).type
        if is_temporal(t) and sem in SEMANTIC_UNITS:
            forms[name] = ColumnForm("int", SEMANTIC_UNITS[sem])
        elif is_temporal(t) and sem is None and typ in _CONNECT_INTS:
            forms[name] = ColumnForm("int", default_unit(t))
        elif pa.types.is_decimal(t) and sem == DECIMAL_SEMANTIC and name in numeric:
            forms[name] = ColumnForm("numdec")
        elif pa.types.is_decimal(t) and sem == DECIMAL_SEMANTIC:
            forms[name] = ColumnForm("b64dec", scale=int(scale) if scale else 0)
    return tuple(sorted(forms.items()))


def _semantics_of_schema_doc(doc: Any) -> dict[str, Semantic]:
    out: dict[str, Semantic] = {}
    for outer in (doc or {}).get("fields") or []:
        if not isinstance(outer, dict) or outer.get("field") not in ("before", "after"):
            continue
        for f in outer.get("fields") or []:
            if isinstance(f, dict) and isinstance(f.get("field"), str):
                scale = (f.get("parameters") or {}).get("scale")
                out[f["field"]] = (f.get("name"), f.get("type"), scale)
    return out


def schemaless_decimals(schema: pa.Schema, decimal_mode: DecimalMode) -> dict[str, ColumnForm]:
    """The forms of decimal columns in records without a schema: base64 at the column's
    scale in Debezium's ``precise`` mode, else as parsed (text or numbers)."""
    if decimal_mode != "precise":
        return {}
    return {
        f.name: ColumnForm("b64dec", scale=f.type.scale)
        for f in schema
        if pa.types.is_decimal(f.type)
    }


def json_number_fields(values: Iterable[bytes], schema: pa.Schema, limit: int = 32) -> set[str]:
    """Decimal columns whose values in the first records' images are JSON numbers (an
    unambiguous form: base64 and decimal text are strings)."""
    decimals = [f.name for f in schema if pa.types.is_decimal(f.type)]
    found: set[str] = set()
    for i, v in enumerate(values):
        if i >= limit or not decimals:
            break
        try:
            doc = orjson.loads(v)
        except orjson.JSONDecodeError:
            continue
        env = doc.get("payload", doc) if isinstance(doc, dict) else None
        for image in (env.get("before"), env.get("after")) if isinstance(env, dict) else ():
            if isinstance(image, dict):
                found |= {
                    n
                    for n in decimals
                    if isinstance(image.get(n), int | float) and not isinstance(image.get(n), bool)
                }
    return found


def schemaless_plan(schema: pa.Schema, decimal_mode: DecimalMode) -> Plan:
    """The plan a log starts with: nothing but its decimal mode's forms."""
    return tuple(sorted(schemaless_decimals(schema, decimal_mode).items()))


def probe_plan(
    values: Iterable[bytes],
    schema: pa.Schema,
    decimal_mode: DecimalMode = "string",
    limit: int = 32,
) -> tuple[Plan, bool]:
    """A plan guessed from a batch's first records, and whether it came from a schema.

    A record's own schema decides whatever columns the table holds; without one, the
    decimal mode and the temporal values' JSON types do. Used only after the current
    plan failed (or no longer applies).
    """
    kinds: dict[str, str] = {}
    temporal = [f.name for f in schema if is_temporal(f.type)]
    for i, v in enumerate(values):
        if i >= limit or (temporal and len(kinds) == len(temporal)):
            break
        try:
            doc = orjson.loads(v)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(doc, dict):
            continue
        if isinstance(doc.get("schema"), dict) and isinstance(doc.get("payload"), dict):
            numbers = json_number_fields([v], schema)
            semantics = _semantics_of_schema_doc(doc["schema"])
            return plan_from_semantics(schema, semantics, numbers), True
        for image in (doc.get("before"), doc.get("after")):
            if not isinstance(image, dict):
                continue
            for name in temporal:
                value = image.get(name)
                if name not in kinds and value is not None:
                    kinds[name] = "int" if isinstance(value, int) else "text"
    forms = {
        n: ColumnForm("int", default_unit(schema.field(n).type))
        for n, k in kinds.items()
        if k == "int"
    }
    forms.update(schemaless_decimals(schema, decimal_mode))
    for name in json_number_fields(values, schema, limit):  # numbers, whatever the mode says
        forms[name] = ColumnForm("numdec")
    return tuple(sorted(forms.items())), False


def batch_semantics(schema_col: pa.Array) -> dict[str, Semantic] | None:
    """Per column, the one semantic type every record's schema gives it (None: no schemas).

    Raises WireValueError when records disagree, so the batch is split and each part
    is read with its own plan.
    """
    n_with = len(schema_col) - schema_col.null_count
    if n_with == 0:
        return None
    if n_with != len(schema_col):
        raise WireValueError("records with and without debezium-json.schema-include mixed")
    s = pl.from_arrow(schema_col)
    assert isinstance(s, pl.Series)
    outer = s.struct.field("fields").explode().drop_nulls()
    outer = outer.filter(outer.struct.field("field").is_in(["before", "after"]))
    inner = outer.struct.field("fields").explode().drop_nulls()
    if inner.is_empty():
        return {}
    df = (
        inner.struct.unnest()
        .select(
            pl.col("field"),
            pl.col("name"),
            pl.col("type"),
            pl.col("parameters").struct.field("scale").alias("scale"),
        )
        .unique()
    )
    if df["field"].n_unique() != len(df):
        raise WireValueError("records carry different debezium schemas for the same column")
    return {r[0]: (r[1], r[2], r[3]) for r in df.iter_rows()}


# --------------------------------------------------------------------------- values


def _decimal_from_base64(arr: pa.Array, scale: int, t: pa.DataType) -> pa.Array:
    s = pl.from_arrow(arr.cast(pa.large_string()))
    assert isinstance(s, pl.Series)
    raw = s.str.decode("base64", strict=True).to_arrow().cast(pa.large_binary())
    if raw.offset:
        raw = pa.concat_arrays([raw])
    n = len(raw)
    offsets = np.frombuffer(raw.buffers()[1], dtype=np.int64)[: n + 1]
    data_buf = raw.buffers()[2]
    data = (
        np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    )
    lengths = np.diff(offsets)
    if lengths.size and lengths.max() > 16:
        raise WireValueError(f"decimal wider than 16 bytes cannot be read into {t}")
    starts = offsets[:-1]
    first = data[np.minimum(starts, max(len(data) - 1, 0))] if len(data) else np.zeros(n, np.uint8)
    neg = (lengths > 0) & (first >= 0x80)
    le = np.repeat(np.where(neg, 0xFF, 0x00).astype(np.uint8)[:, None], 16, axis=1)
    for k in range(16):  # byte positions, not rows
        m = lengths > k
        le[m, k] = data[starts[m] + lengths[m] - 1 - k]
    dec = pa.Array.from_buffers(pa.decimal128(38, scale), n, [None, pa.py_buffer(le.tobytes())])
    if arr.null_count:
        dec = pc.if_else(arr.is_valid(), dec, pa.scalar(None, dec.type))
    return dec.cast(t)


_PER_S = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def _temporal_from_int(arr: pa.Array, unit: str, t: pa.DataType) -> pa.Array:
    ints = arr.cast(pa.int64())
    if pa.types.is_date(t):
        if unit != "D":
            raise WireValueError(f"an integer in {unit} cannot be read into a date column")
        return ints.cast(pa.int32()).cast(pa.date32()).cast(t)
    if unit == "D":
        raise WireValueError(f"epoch days cannot be read into a {t} column")
    if pa.types.is_timestamp(t):
        return ints.cast(pa.timestamp(unit, tz=t.tz)).cast(t)
    if pa.types.is_duration(t):
        return ints.cast(pa.duration(unit)).cast(t)
    # time of day: must lie within one day
    day = 86400 * _PER_S[unit]
    if pc.any(pc.or_(pc.less(ints, 0), pc.greater_equal(ints, day))).as_py():
        raise WireValueError(f"time of day out of range 0..{day - 1} {unit}")
    if unit in ("s", "ms"):
        return ints.cast(pa.int32()).cast(pa.time32(unit)).cast(t)
    return ints.cast(pa.time64(unit)).cast(t)


def apply_form(arr: pa.Array, t: pa.DataType, form: ColumnForm) -> pa.Array:
    """A column parsed in a Debezium form -> the column's type t (raises on misfits)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks else pa.array([], arr.type)
    if form.kind == "b64dec":
        return _decimal_from_base64(arr, form.scale or 0, t)
    if form.kind == "numdec":
        return arr.cast(t)
    return _temporal_from_int(arr, str(form.unit), t)
