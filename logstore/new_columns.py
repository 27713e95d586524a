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

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

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


# -- exact, per record (the worker: a record the table cannot take is dead-lettered) --

#: record index in a batch -> the columns it carries (with a value) that the table lacks
Unknown = dict[int, list[str]]


def _note_extra(image: pa.Array, declared: pa.DataType, alive: pa.Array, out: Unknown) -> None:
    """Records whose ``image`` struct has a value in a field ``declared`` does not name."""
    names = {f.name for f in declared}
    for f in image.type:
        if f.name in names:
            continue
        carried = pc.and_(pc.and_(alive, image.is_valid()), image.field(f.name).is_valid())
        for i in np.flatnonzero(carried.to_numpy(zero_copy_only=False)).tolist():
            out.setdefault(int(i), []).append(f.name)


def strip_inferred(env: pa.Table, schema: pa.Schema) -> tuple[pa.Table, Unknown]:
    """An envelope parsed with inferred extra fields -> the declared ``schema``, and the
    records whose images carried a column the table lacks.

    The Arrow reader infers the fields the explicit schema does not name, so the check
    is vectorized: only the records found are looked at one by one. A column whose value
    is null carries nothing and is not reported.
    """
    out: Unknown = {}
    cols = []
    for f in schema:
        col = env.column(f.name).combine_chunks() if env.num_rows else pa.nulls(0, f.type)
        yes = pa.array(np.ones(len(col), dtype=bool))
        if f.name in ("before", "after"):
            _note_extra(col, f.type, yes, out)
        elif f.name == "payload":
            for side in ("before", "after"):
                _note_extra(col.field(side), f.type.field(side).type, col.is_valid(), out)
        cols.append(col if col.type == f.type else col.cast(f.type))
    return pa.Table.from_arrays(cols, schema=schema), {i: sorted(n) for i, n in out.items()}


def unknown_per_record(values: Sequence[bytes | None], known: set[str]) -> Unknown:
    """The same answer record by record (orjson), when the inferring parse failed on a
    batch whose extra fields disagree in type between records (rare)."""
    out: Unknown = {}
    for i, value in enumerate(values):
        doc = _doc(value)
        env = doc["payload"] if doc is not None and isinstance(doc.get("payload"), dict) else doc
        if env is None:
            continue
        extra: set[str] = set()
        for side in ("after", "before"):
            image = env.get(side)
            if isinstance(image, dict):
                extra.update(n for n, v in image.items() if v is not None and n not in known)
        if extra:
            out[i] = sorted(extra)
    return out


def unknown_reason(names: Sequence[str]) -> str:
    return (
        f"it carries columns the table does not have: {', '.join(names)}. Writers that change "
        "the schema add them to the table first (`dts ingest --evolve-schema`, "
        "Table.add_column, ALTER TABLE ... ADD COLUMNS); a record that arrives before they "
        "exist is dead-lettered, never taken with the columns dropped"
    )
