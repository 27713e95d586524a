"""JSON wire forms of Arrow values, both directions.

Writing goes through polars (``struct.json_encode``), so ``to_wire_expr`` turns
a column into what polars should print. Reading goes through pyarrow's JSON
reader (exact and strict), except for columns holding maps, whose JSON objects
have data-dependent keys the Arrow reader cannot parse; those are read by
polars with every integer and decimal leaf read as text and cast strictly
afterwards (polars alone would truncate ``1.5`` to 1 and turn overflow into
null). ``from_wire`` turns what either parser produced into the column's type
and raises on any value that does not fit.

Forms (what the encoder writes; the reader accepts the same):

- integers, floats, booleans: JSON numbers / booleans;
- decimals: strings with the scale (``"12.30"``), numbers also accepted;
- strings as strings; binary as base64;
- dates ``YYYY-MM-DD``; times ``HH:MM:SS[.f]``; timestamps without zone
  ``YYYY-MM-DD HH:MM:SS[.f]``; with zone ISO-8601 in UTC with offset;
- durations ISO-8601 ``[-]PT<seconds>[.f]S`` (days, hours and minutes
  ``P1DT2H3M`` also accepted on read);
- lists as arrays, structs as objects, maps as objects whose keys are the
  keys' own wire form as text (``{"1":"a"}`` for an int key).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import WireValueError

# --------------------------------------------------------------------------- classify


def is_binary(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    )


def is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t))


def has_map(t: pa.DataType) -> bool:
    """True when a map occurs anywhere in t (such columns are parsed by polars)."""
    if pa.types.is_map(t):
        return True
    if is_list(t):
        return has_map(t.value_type)
    if pa.types.is_struct(t):
        return any(has_map(f.type) for f in t)
    return False


def _is_text_leaf(t: pa.DataType) -> bool:
    """Leaves the Arrow JSON reader cannot parse from our form: read as strings."""
    return bool(
        pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_duration(t) or is_binary(t)
    )


def arrow_parse_type(t: pa.DataType) -> pa.DataType:
    """The type pyarrow's JSON reader parses a value of type t as."""
    if _is_text_leaf(t) or pa.types.is_decimal256(t):
        return pa.string()
    if pa.types.is_float16(t):
        return pa.float64()  # the reader has no half floats; cast after (exact for float16 text)
    if is_list(t):
        return pa.list_(arrow_parse_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, arrow_parse_type(f.type)) for f in t])
    return t


def polars_parse_type(t: pa.DataType) -> pl.DataType | type[pl.DataType]:
    """The dtype polars' JSON decoder parses a value of type t as (map columns)."""
    if pa.types.is_map(t):
        return pl.Map(pl.String, polars_parse_type(t.item_type))
    if is_list(t):
        return pl.List(polars_parse_type(t.value_type))
    if pa.types.is_struct(t):
        return pl.Struct({f.name: polars_parse_type(f.type) for f in t})
    if pa.types.is_boolean(t):
        return pl.Boolean
    if pa.types.is_floating(t):
        return pl.Float64
    if pa.types.is_null(t):
        return pl.Null
    # integers, decimals, strings, temporals, binary: as text, converted strictly later
    return pl.String


# --------------------------------------------------------------------------- write


def _needs_out_conversion(t: pa.DataType) -> bool:
    if is_binary(t):
        return True
    if pa.types.is_timestamp(t) and t.tz is not None and t.tz not in ("UTC", "+00:00"):
        return True
    if pa.types.is_map(t):
        return not (pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type)) or (
            _needs_out_conversion(t.item_type)
        )
    if is_list(t):
        return _needs_out_conversion(t.value_type)
    if pa.types.is_struct(t):
        return any(_needs_out_conversion(f.type) for f in t)
    return False


def polars_safe_type(t: pa.DataType) -> pa.DataType:
    """t with the leaves polars cannot take (or would print in another form) replaced.

    decimal256 becomes its exact string (what decimals are written as anyway) and
    date64 becomes date32, so it is written ``YYYY-MM-DD`` like every date.
    """
    if pa.types.is_decimal256(t):
        return pa.string()
    if pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_map(t):
        return pa.map_(
            t.key_field.with_type(polars_safe_type(t.key_type)),
            t.item_field.with_type(polars_safe_type(t.item_type)),
        )
    if is_list(t):
        field = t.value_field.with_type(polars_safe_type(t.value_type))
        return pa.large_list(field) if pa.types.is_large_list(t) else pa.list_(field)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(polars_safe_type(f.type)) for f in t])
    return t


def to_wire_expr(expr: pl.Expr, t: pa.DataType) -> pl.Expr:
    """polars expression turning a column into its JSON-ready form.

    Binary becomes base64; zoned timestamps are written in UTC, because polars prints
    offsets to the minute only and historic zones have second offsets (LMT); map keys
    that are not strings are written as the text of their wire form.
    """
    if not _needs_out_conversion(t):
        return expr
    if pa.types.is_timestamp(t):
        return expr.dt.convert_time_zone("UTC")
    if pa.types.is_map(t):
        el = pl.element()
        key = to_wire_expr(el.struct.field("key"), t.key_type).cast(pl.String)
        value = to_wire_expr(el.struct.field("value"), t.item_type)
        return (
            expr.map.entries()
            .list.eval(pl.struct(key.alias("key"), value.alias("value")))
            .list.to_map()
        )
    if is_list(t):
        return expr.list.eval(to_wire_expr(pl.element(), t.value_type))
    if pa.types.is_struct(t):
        fields = [to_wire_expr(expr.struct.field(f.name), f.type).alias(f.name) for f in t]
        return pl.when(expr.is_null()).then(None).otherwise(pl.struct(fields))
    return expr.bin.encode("base64")


# --------------------------------------------------------------------------- read


def _polars_leaf(arr: pa.Array, fn) -> pa.Array:  # type: ignore[no-untyped-def]
    s = pl.from_arrow(arr)
    assert isinstance(s, pl.Series)
    return s.to_frame("v").select(fn(pl.col("v"))).to_series().to_arrow()


_DURATION_RE = (
    r"^(?P<neg>-?)P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?"
    r"(?:(?P<s>\d+)(?:\.(?P<f>\d{1,9}))?S)?)?$"
)
_UNIT_PER_S = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def parse_duration(arr: pa.Array, t: pa.DataType) -> pa.Array:
    """ISO-8601 durations (``[-]P[nD][T[nH][nM][n[.f]S]]``) -> duration(t.unit), exactly."""
    text = arr.cast(pa.string())
    valid = text.is_valid()
    # every part is optional in the pattern, so also ask for at least one digit
    ok = pc.and_(
        pc.match_substring_regex(text, _DURATION_RE), pc.match_substring_regex(text, r"\d")
    )
    if not pc.all(pc.or_kleene(pc.invert(valid), ok)).as_py():
        bad = pc.filter(text, pc.invert(pc.fill_null(ok, True)))[0].as_py()
        raise WireValueError(f"not an ISO-8601 duration: {bad!r}")
    g = pc.extract_regex(pc.fill_null(text, "PT0S"), _DURATION_RE)

    def num(name: str) -> np.ndarray:
        part = pc.fill_null(pc.if_else(pc.equal(g.field(name), ""), None, g.field(name)), "0")
        return np.asarray(part.cast(pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)

    per_s = _UNIT_PER_S[t.unit]
    frac_txt = pc.utf8_rpad(pc.fill_null(g.field("f"), ""), 9, "0")
    frac_ns = np.asarray(frac_txt.cast(pa.int64()).to_numpy(zero_copy_only=False), np.int64)
    step = 10**9 // per_s
    if np.any(frac_ns % step):
        raise WireValueError(f"duration has more precision than its column ({t})")
    seconds = ((num("d") * 24 + num("h")) * 60 + num("m")) * 60 + num("s")
    if np.any(seconds > np.iinfo(np.int64).max // per_s - 1):
        raise WireValueError(f"duration out of range for {t}")
    value = seconds * per_s + frac_ns // step
    neg = np.asarray(pc.equal(g.field("neg"), "-").to_numpy(zero_copy_only=False), dtype=bool)
    value = np.where(neg, -value, value)
    return pa.array(value, pa.int64(), mask=~np.asarray(valid, dtype=bool)).cast(t)


def _leaf_from_text(arr: pa.Array, t: pa.DataType) -> pa.Array:
    """A string array in wire form -> type t (strict: any misfit raises)."""
    if pa.types.is_date(t):
        out = _polars_leaf(arr, lambda e: e.str.to_date("%Y-%m-%d", strict=True))
        return out.cast(t)
    if pa.types.is_time(t):
        out = _polars_leaf(arr, lambda e: e.str.to_time("%H:%M:%S%.f", strict=True))
        return out.cast(t)
    if is_binary(t):
        out = _polars_leaf(arr, lambda e: e.str.decode("base64", strict=True))
        return out.cast(t)
    if pa.types.is_duration(t):
        return parse_duration(arr, t)
    if pa.types.is_timestamp(t) and t.tz is None:
        arr = pc.replace_substring_regex(arr, "Z$", "")  # UTC designator on a zoneless column
    return pc.cast(arr, t)  # numbers, decimals, booleans, strings, timestamps: Arrow's strict cast


def from_wire(arr: pa.Array, t: pa.DataType) -> pa.Array:
    """What a JSON parser produced for a column -> the column's type t (raises on misfits)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks else pa.array([], arr.type)
    if arr.type == t:
        return arr
    if (pa.types.is_map(t) or is_list(t)) and arr.offset:
        arr = pa.concat_arrays([arr])  # offsets from 0, so .values lines up with .offsets
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_map(t):
        entries = arr.values
        keys = from_wire(entries.field(0), t.key_type)
        items = from_wire(entries.field(1), t.item_type)
        map_type = pa.map_(t.key_field, t.item_field)
        return pa.MapArray.from_arrays(arr.offsets, keys, items, type=map_type, mask=mask)
    if is_list(t):
        values = from_wire(arr.values, t.value_type)
        cls = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        return cls.from_arrays(arr.offsets, values, type=t, mask=mask)
    if pa.types.is_struct(t):
        children = [from_wire(arr.field(f.name), f.type) for f in t]
        return pa.StructArray.from_arrays(
            children, fields=list(t), mask=arr.is_null() if arr.null_count else None
        )
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return _leaf_from_text(arr, t)
    return pc.cast(arr, t)
