"""A dts table's schemas as Iceberg schemas: types mapped, field ids stable over the
table's history, and the name mapping readers need for dts's Parquet files.

dts writes Parquet without field ids, so Iceberg readers find columns by name through
``schema.name-mapping.default``. Ids are handed out walking the schema versions in
order, depth first, a new id to each column path not seen before: columns are only ever
appended (and types widened), so a column keeps its id across every version.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from filestore.errors import IcebergMetadataError
from filestore.format.row_kind import SEQUENCE_NUMBER, VALUE_KIND
from filestore.format.schema import KEY_PREFIX, TableSchema

Path = tuple[str, ...]


class FieldIds:
    """Column path -> Iceberg field id, over the table's schema versions in order."""

    def __init__(self, versions: Sequence[TableSchema]) -> None:
        self.ids: dict[Path, int] = {}
        for version in versions:
            for f in version.arrow_schema:
                self._assign((f.name,), f.type)

    @property
    def last_id(self) -> int:
        return max(self.ids.values(), default=0)

    def _assign(self, path: Path, t: pa.DataType) -> None:
        if path not in self.ids:
            self.ids[path] = self.last_id + 1
        for name, child in _children(t):
            self._assign((*path, name), child)


def _children(t: pa.DataType) -> list[tuple[str, pa.DataType]]:
    if pa.types.is_struct(t):
        return [(t.field(i).name, t.field(i).type) for i in range(t.num_fields)]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [("element", t.value_type)]
    if pa.types.is_map(t):
        return [("key", t.key_type), ("value", t.item_type)]
    return []


_PRIMITIVES: dict[pa.DataType, str] = {
    pa.bool_(): "boolean",
    pa.int8(): "int",
    pa.int16(): "int",
    pa.int32(): "int",
    pa.int64(): "long",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.date32(): "date",
    pa.string(): "string",
    pa.large_string(): "string",
    pa.binary(): "binary",
    pa.large_binary(): "binary",
}


def iceberg_type(t: pa.DataType, path: Path, ids: FieldIds) -> Any:
    """The Iceberg type JSON of Arrow type ``t`` at column ``path``."""
    if t in _PRIMITIVES:
        return _PRIMITIVES[t]
    if pa.types.is_decimal(t):
        return f"decimal({t.precision}, {t.scale})"
    if pa.types.is_timestamp(t) and t.unit in ("ms", "us"):
        return "timestamptz" if t.tz is not None else "timestamp"
    if pa.types.is_time(t) and t.unit in ("ms", "us"):
        return "time"
    if pa.types.is_struct(t):
        return {"type": "struct", "fields": _fields(_children(t), path, ids)}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        elem = (*path, "element")
        return {
            "type": "list",
            "element-id": ids.ids[elem],
            "element": iceberg_type(t.value_type, elem, ids),
            "element-required": False,
        }
    if pa.types.is_map(t):
        key, value = (*path, "key"), (*path, "value")
        return {
            "type": "map",
            "key-id": ids.ids[key],
            "key": iceberg_type(t.key_type, key, ids),
            "value-id": ids.ids[value],
            "value": iceberg_type(t.item_type, value, ids),
            "value-required": False,
        }
    raise IcebergMetadataError(
        f"column {'.'.join(path)}: type {t} has no Iceberg format-version 2 equivalent "
        "(timestamps and times in ns need format version 3)"
    )


def _fields(children: list[tuple[str, pa.DataType]], parent: Path, ids: FieldIds) -> list[Any]:
    out = []
    for name, t in children:
        path = (*parent, name)
        out.append(
            {
                "id": ids.ids[path],
                "name": name,
                "required": False,
                "type": iceberg_type(t, path, ids),
            }
        )
    return out


def iceberg_schema(schema: TableSchema, ids: FieldIds) -> dict[str, Any]:
    """One schema version; the primary key as ``identifier-field-ids``.

    Every field is optional: a key column is never null in dts, but an identifier field
    must be required in Iceberg, so key columns are required."""
    fields = _fields([(f.name, f.type) for f in schema.arrow_schema], (), ids)
    keys = set(schema.primary_key)
    for f in fields:
        if f["name"] in keys:
            f["required"] = True
    return {
        "type": "struct",
        "schema-id": schema.id,
        "fields": fields,
        "identifier-field-ids": [ids.ids[(k,)] for k in schema.primary_key],
    }


#: ids for the columns dts keeps beside the table's in its files (no schema names them;
#: readers that map every column of a file, as pyiceberg does, need an id for each)
SYSTEM_IDS = {SEQUENCE_NUMBER: 2_000_000_001, VALUE_KIND: 2_000_000_002}
KEY_ID_BASE = 2_000_000_100


def name_mapping(ids: FieldIds, primary_key: Sequence[str]) -> list[dict[str, Any]]:
    """``schema.name-mapping.default``: every column path by name to its id, and the
    system columns of dts's files to ids outside the table's (read by no query)."""
    system = [{"field-id": fid, "names": [name]} for name, fid in SYSTEM_IDS.items()]
    system += [
        {"field-id": KEY_ID_BASE + i, "names": [KEY_PREFIX + k]} for i, k in enumerate(primary_key)
    ]
    return [*_mapped(ids), *system]


def _mapped(ids: FieldIds) -> list[dict[str, Any]]:

    def level(parent: Path) -> list[dict[str, Any]]:
        out = []
        for path, fid in sorted(ids.ids.items(), key=lambda kv: kv[1]):
            if path[:-1] == parent:
                entry: dict[str, Any] = {"field-id": fid, "names": [path[-1]]}
                nested = level(path)
                if nested:
                    entry["fields"] = nested
                out.append(entry)
        return out

    return level(())


_AVRO_PARTITION_TYPES: dict[pa.DataType, Any] = {
    pa.bool_(): "boolean",
    pa.int8(): "int",
    pa.int16(): "int",
    pa.int32(): "int",
    pa.int64(): "long",
    pa.string(): "string",
    pa.large_string(): "string",
    pa.date32(): {"type": "int", "logicalType": "date"},
}


def partition_spec(table: str, schema: TableSchema, ids: FieldIds) -> dict[str, Any]:
    """The identity partition spec of the partition keys, with their Avro types
    (manifests' ``partition`` record) and arrow types (to type the values)."""
    arrow = schema.arrow_schema
    fields, avro, types = [], [], []
    for i, k in enumerate(schema.partition_keys):
        t = arrow.field(k).type
        if t not in _AVRO_PARTITION_TYPES:
            raise IcebergMetadataError(
                f"table {table}: partition column {k} of type {t} has no "
                "Iceberg identity partition here (boolean, integers, string, date)"
            )
        fid = 1000 + i
        fields.append(
            {"name": k, "transform": "identity", "source-id": ids.ids[(k,)], "field-id": fid}
        )
        avro.append(
            {
                "name": k,
                "type": ["null", _AVRO_PARTITION_TYPES[t]],
                "default": None,
                "field-id": fid,
            }
        )
        types.append((k, t))
    return {
        "schema": iceberg_schema(schema, ids),
        "partition-spec": fields,
        "avro-partition-fields": avro,
        "partition-types": types,
    }


def partition_values(
    types: Sequence[tuple[str, pa.DataType]], values: tuple[str | None, ...]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for (name, t), v in zip(types, values, strict=True):
        if v is None:
            out[name] = None
        elif pa.types.is_date32(t):
            out[name] = pa.scalar(v).cast(t).cast(pa.int32()).as_py()
        else:
            out[name] = pa.scalar(v).cast(t).as_py()
    return out
