"""Arrow types to and from JSON (schema files), and which type changes are lossless."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from filestore.errors import SchemaError

_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float16": pa.float16(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "string": pa.string(),
    "large_string": pa.large_string(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "date32": pa.date32(),
    "date64": pa.date64(),
}
_NAMES = {v: k for k, v in _PRIMITIVES.items()}
#: the primitive type names a schema accepts as a plain string ("int64", "string", ...)
PRIMITIVE_TYPE_NAMES: tuple[str, ...] = tuple(_PRIMITIVES)


def type_to_json(t: pa.DataType) -> Any:
    if t in _NAMES:
        return _NAMES[t]
    if pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary_view(t):
        return "binary"
    if pa.types.is_timestamp(t):
        return {"type": "timestamp", "unit": t.unit, "tz": t.tz}
    if pa.types.is_time32(t) or pa.types.is_time64(t):
        return {"type": "time", "unit": t.unit}
    if pa.types.is_duration(t):
        return {"type": "duration", "unit": t.unit}
    if pa.types.is_decimal(t):
        return {"type": "decimal", "precision": t.precision, "scale": t.scale}
    if pa.types.is_fixed_size_binary(t):
        return {"type": "fixed_size_binary", "width": t.byte_width}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        kind = "list" if pa.types.is_list(t) else "large_list"
        return {"type": kind, "element": field_to_json(t.value_field)}
    if pa.types.is_struct(t):
        return {
            "type": "struct",
            "fields": [field_to_json(t.field(i)) for i in range(t.num_fields)],
        }
    if pa.types.is_map(t):
        return {
            "type": "map",
            "key": field_to_json(t.key_field),
            "item": field_to_json(t.item_field),
        }
    if pa.types.is_dictionary(t):
        return type_to_json(t.value_type)
    raise SchemaError(f"type {t} is not supported in a table schema")


def type_from_json(j: Any) -> pa.DataType:
    if isinstance(j, str):
        if j not in _PRIMITIVES:
            raise SchemaError(f"unknown type {j!r} in schema file")
        return _PRIMITIVES[j]
    kind = j["type"]
    if kind == "timestamp":
        return pa.timestamp(j["unit"], tz=j.get("tz"))
    if kind == "time":
        return pa.time32(j["unit"]) if j["unit"] in ("s", "ms") else pa.time64(j["unit"])
    if kind == "duration":
        return pa.duration(j["unit"])
    if kind == "decimal":
        p, s = j["precision"], j["scale"]
        return pa.decimal128(p, s) if p <= 38 else pa.decimal256(p, s)
    if kind == "fixed_size_binary":
        return pa.binary(j["width"])
    if kind == "list":
        return pa.list_(field_from_json(j["element"]))
    if kind == "large_list":
        return pa.large_list(field_from_json(j["element"]))
    if kind == "struct":
        return pa.struct([field_from_json(f) for f in j["fields"]])
    if kind == "map":
        return pa.map_(field_from_json(j["key"]), field_from_json(j["item"]))
    raise SchemaError(f"unknown type {kind!r} in schema file")


def field_to_json(f: pa.Field) -> dict[str, Any]:
    return {"name": f.name, "type": type_to_json(f.type), "nullable": f.nullable}


def field_from_json(j: dict[str, Any]) -> pa.Field:
    return pa.field(j["name"], type_from_json(j["type"]), nullable=j.get("nullable", True))


def normalize_type(t: pa.DataType) -> pa.DataType:
    """The type a schema stores for t (views and dictionaries become plain types)."""
    return type_from_json(type_to_json(t))


_INT_BITS = {pa.int8(): 8, pa.int16(): 16, pa.int32(): 32, pa.int64(): 64}
_UINT_BITS = {pa.uint8(): 8, pa.uint16(): 16, pa.uint32(): 32, pa.uint64(): 64}
_FLOAT_MANTISSA = {pa.float16(): 11, pa.float32(): 24, pa.float64(): 53}
_TIME_UNITS = ("s", "ms", "us", "ns")


def is_lossless_change(old: pa.DataType, new: pa.DataType) -> bool:
    """True when every value of type old has an exact representation in type new."""
    if old == new:
        return True
    if old in _INT_BITS:
        if new in _INT_BITS:
            return _INT_BITS[new] >= _INT_BITS[old]
        if new in _FLOAT_MANTISSA:
            return _FLOAT_MANTISSA[new] > _INT_BITS[old]
        if pa.types.is_decimal(new):
            digits = {8: 3, 16: 5, 32: 10, 64: 19}[_INT_BITS[old]]
            return bool(new.precision - new.scale >= digits)
        return False
    if old in _UINT_BITS:
        if new in _UINT_BITS:
            return _UINT_BITS[new] >= _UINT_BITS[old]
        if new in _INT_BITS:
            return _INT_BITS[new] > _UINT_BITS[old]
        if new in _FLOAT_MANTISSA:
            return _FLOAT_MANTISSA[new] >= _UINT_BITS[old]
        return False
    if old in _FLOAT_MANTISSA:
        return new in _FLOAT_MANTISSA and _FLOAT_MANTISSA[new] >= _FLOAT_MANTISSA[old]
    if pa.types.is_string(old) or pa.types.is_large_string(old):
        return bool(pa.types.is_string(new) or pa.types.is_large_string(new))
    if pa.types.is_binary(old) or pa.types.is_large_binary(old):
        return bool(pa.types.is_binary(new) or pa.types.is_large_binary(new))
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return bool(
            new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
        )
    if pa.types.is_timestamp(old) and pa.types.is_timestamp(new):
        return old.tz == new.tz and _TIME_UNITS.index(new.unit) >= _TIME_UNITS.index(old.unit)
    if pa.types.is_date32(old):
        return pa.types.is_date64(new) or (pa.types.is_timestamp(new) and new.tz is None)
    return bool(pa.types.is_null(old))
