"""Columns a log's records carry that its table does not have (a source schema change).

The Arrow JSON reader ignores fields the parse schema does not name, so without this
check a column added in the source (``ALTER TABLE ... ADD COLUMN``) would vanish
silently. Debezium writes every column in every image, so once a column exists, every
later record has it: a batch is checked by its first and last records with an image,
and only a batch that has a new column is scanned record by record to find the first
record that carries it (rare: once per schema change).

A new column's type comes from the record's Debezium schema when it has one, else from
the first non-null JSON value in the batch (integer -> int64, number -> float64,
boolean, anything else -> string).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from logstore.errors import SourceSchemaChanged

_SAMPLE = 4  # records with an image looked at from each end of a batch

# Kafka Connect schema types and Debezium's semantic types -> Arrow
_CONNECT_TYPES: Mapping[str, pa.DataType] = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "bytes": pa.binary(),
}
_SEMANTIC_TYPES: Mapping[str, pa.DataType] = {
    "io.debezium.time.Date": pa.date32(),
    "org.apache.kafka.connect.data.Date": pa.date32(),
    "io.debezium.time.Timestamp": pa.timestamp("ms"),
    "org.apache.kafka.connect.data.Timestamp": pa.timestamp("ms"),
    "io.debezium.time.MicroTimestamp": pa.timestamp("us"),
    "io.debezium.time.NanoTimestamp": pa.timestamp("ns"),
    "io.debezium.time.ZonedTimestamp": pa.timestamp("us", tz="UTC"),
    "io.debezium.time.Time": pa.time32("ms"),
    "io.debezium.time.MicroTime": pa.time64("us"),
}


@dataclass(frozen=True)
class NewColumns:
    """Record ``index`` of a batch is the first to carry ``fields`` (name -> type)."""

    index: int
    fields: dict[str, pa.DataType]


def _doc(value: bytes | None) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def _image_names(doc: dict[str, Any]) -> set[str] | None:
    env = doc["payload"] if isinstance(doc.get("payload"), dict) else doc
    names: set[str] = set()
    found = False
    for side in ("after", "before"):
        image = env.get(side)
        if isinstance(image, dict):
            names.update(image)
            found = True
    return names if found else None


def _sampled_unknown(values: Sequence[bytes | None], known: set[str]) -> bool:
    seen = 0
    for order in (range(len(values)), range(len(values) - 1, -1, -1)):
        seen = 0
        for i in order:
            doc = _doc(values[i])
            names = _image_names(doc) if doc is not None else None
            if names is None:
                continue
            if names - known:
                return True
            seen += 1
            if seen >= _SAMPLE:
                break
    return False


def _schema_type(doc: dict[str, Any], name: str) -> pa.DataType | None:
    schema = doc.get("schema")
    if not isinstance(schema, dict):
        return None
    for outer in schema.get("fields") or []:
        if not isinstance(outer, dict) or outer.get("field") not in ("after", "before"):
            continue
        for f in outer.get("fields") or []:
            if isinstance(f, dict) and f.get("field") == name:
                semantic = f.get("name")
                if semantic == "org.apache.kafka.connect.data.Decimal":
                    params = f.get("parameters") or {}
                    precision = int(params.get("connect.decimal.precision", 38))
                    return pa.decimal128(precision, int(params.get("scale", 0)))
                return _SEMANTIC_TYPES.get(semantic or "") or _CONNECT_TYPES.get(f.get("type", ""))
    return None


def _json_type(value: Any) -> pa.DataType:
    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        return pa.int64()
    if isinstance(value, float):
        return pa.float64()
    return pa.string()


def _value_types(docs: Sequence[dict[str, Any]], names: set[str]) -> dict[str, pa.DataType]:
    """Per new column, the type of its first non-null value (string when all are null)."""
    types: dict[str, pa.DataType] = {}
    for doc in docs:
        env = doc["payload"] if isinstance(doc.get("payload"), dict) else doc
        for side in ("after", "before"):
            image = env.get(side)
            if not isinstance(image, dict):
                continue
            for n in names - set(types):
                if image.get(n) is not None:
                    types[n] = _json_type(image[n])
    return {n: types.get(n, pa.string()) for n in sorted(names)}


def find_new_columns(values: Sequence[bytes | None], schema: pa.Schema) -> NewColumns | None:
    """The first record of a batch that carries a column ``schema`` lacks, if any."""
    known = set(schema.names)
    if not values or not _sampled_unknown(values, known):
        return None
    for i, value in enumerate(values):
        doc = _doc(value)
        names = _image_names(doc) if doc is not None else None
        if doc is None or names is None or not (names - known):
            continue
        new = names - known
        typed = {n: t for n in new if (t := _schema_type(doc, n)) is not None}
        rest = [d for v in values[i:] if (d := _doc(v)) is not None]
        return NewColumns(i, {**_value_types(rest, new - set(typed)), **typed})
    return None


def check_new_columns(
    values: Sequence[bytes | None],
    partitions: Sequence[int],
    offsets: Sequence[int],
    schema: pa.Schema,
    topic: str,
) -> None:
    """Raise ``SourceSchemaChanged`` at the first record carrying an unknown column."""
    found = find_new_columns(values, schema)
    if found is not None:
        i = found.index
        raise SourceSchemaChanged(topic, partitions[i], offsets[i], i, found.fields)
