"""Table schemas: versioned ``schema/schema-N`` JSON files and the rules for evolving them."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pyarrow as pa

from filestore.errors import SchemaError
from filestore.format.identifiers import check_identifier
from filestore.format.options import CoreOptions, check_known
from filestore.format.paths import TablePaths
from filestore.format.row_kind import ROW_KIND_COLUMN, SEQUENCE_NUMBER, VALUE_KIND
from filestore.format.types import (
    field_from_json,
    field_to_json,
    is_lossless_change,
    normalize_type,
)
from filestore.io.fileio import FileIO

SYSTEM_COLUMNS = (SEQUENCE_NUMBER, VALUE_KIND, ROW_KIND_COLUMN)
KEY_PREFIX = "_KEY_"


@dataclass(frozen=True)
class TableSchema:
    """One version of a table's schema.

    Stored as ``schema/schema-<id>`` (JSON, Paimon's layout); a new version is written
    by ``Table.evolve_schema`` or ``Table.set_options``, never changed in place.

    Attributes:
        id: the version, 0 at creation, one more per change.
        arrow_schema: the columns (primary-key columns non-nullable).
        primary_key: the primary-key columns; empty for an append-only table.
        partition_keys: the partition columns; empty for an unpartitioned table.
        options: the table options as stored, string to string (``core_options``
            resolves them).
        comment: the table's free-text description, or None.
        time_millis: when the version was created, epoch ms.

    Example:
        >>> schema = table.schema
        >>> schema.id, schema.primary_key, schema.num_buckets
        (0, ['id'], 1)
        >>> TableSchema.from_json(schema.to_json()) == schema
        True
    """

    id: int
    arrow_schema: pa.Schema
    primary_key: list[str] = field(default_factory=list)
    partition_keys: list[str] = field(default_factory=list)
    options: dict[str, str] = field(default_factory=dict)
    comment: str | None = None
    time_millis: int = 0

    @cached_property
    def core_options(self) -> CoreOptions:
        """The options parsed (once per schema version: the object is immutable)."""
        return CoreOptions.from_map(self.options)

    @property
    def num_buckets(self) -> int:
        """The bucket count (option ``bucket``); files record it as ``total_buckets``."""
        return self.core_options.num_buckets

    @property
    def column_names(self) -> list[str]:
        """Every column's name, in order."""
        return list(self.arrow_schema.names)

    @property
    def bucket_keys(self) -> list[str]:
        """Columns hashed for the bucket: option bucket-key, else the primary key, else all."""
        explicit = list(self.core_options.bucket_key)
        return explicit or list(self.primary_key) or self.column_names

    @property
    def value_columns(self) -> list[str]:
        """The columns not in the primary key."""
        return [n for n in self.arrow_schema.names if n not in self.primary_key]

    def to_json(self) -> dict[str, Any]:
        """The stored form (Paimon's schema JSON: fields with ids, camelCase keys).

        Returns:
            A JSON-ready dict; ``from_json`` reads it back.
        """
        return {
            "version": 1,
            "id": self.id,
            "fields": [{"id": i, **field_to_json(f)} for i, f in enumerate(self.arrow_schema)],
            "primaryKeys": list(self.primary_key),
            "partitionKeys": list(self.partition_keys),
            "options": dict(self.options),
            "comment": self.comment,
            "timeMillis": self.time_millis,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TableSchema:
        """Read the stored form back.

        Args:
            d: a dict as ``to_json`` gives (or a schema file parsed).

        Returns:
            The schema version.
        """
        return cls(
            id=int(d["id"]),
            arrow_schema=pa.schema([field_from_json(f) for f in d["fields"]]),
            primary_key=list(d.get("primaryKeys", [])),
            partition_keys=list(d.get("partitionKeys", [])),
            options={str(k): str(v) for k, v in d.get("options", {}).items()},
            comment=d.get("comment"),
            time_millis=int(d.get("timeMillis", 0)),
        )


def build_schema(
    schema: pa.Schema,
    primary_key: Sequence[str] | None,
    partition_by: Sequence[str] | None,
    options: Mapping[str, str] | None,
    comment: str | None = None,
) -> TableSchema:
    """Validate a new table's schema and return version 0 of it."""
    pk = list(primary_key or [])
    parts = list(partition_by or [])
    opts = {str(k): str(v) for k, v in (options or {}).items()}
    names = schema.names
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise SchemaError(f"column {dup!r} appears twice in the schema")
    for name in names:
        if name in SYSTEM_COLUMNS or name.startswith(KEY_PREFIX):
            raise SchemaError(f"column {name!r} uses a reserved system column name")
    for what, cols in (("primary key", pk), ("partition", parts)):
        for col in cols:
            if col not in names:
                raise SchemaError(
                    f"{what} column {col!r} is not in the schema ({', '.join(names)})"
                )
        if len(set(cols)) != len(cols):
            raise SchemaError(f"{what} lists a column twice: {cols}")
    for col in parts:
        check_identifier("partition column", col)
    check_known(opts)
    core = CoreOptions.from_map(opts)
    if "log.topic" in opts:
        check_identifier("topic", opts["log.topic"])
    for col in core.bucket_key:
        check_identifier("bucket-key column", col)
        if col not in names:
            raise SchemaError(f"bucket-key column {col!r} is not in the schema")
        if pk and col not in pk:
            raise SchemaError(f"bucket-key column {col!r} must be part of the primary key {pk}")
    if core.merge_engine != "deduplicate" and not pk:
        raise SchemaError(f"merge-engine {core.merge_engine!r} needs a primary key")
    if core.log_unavailable_values == "keep-current" and not pk:
        # the current value is the current row of the record's key
        raise SchemaError("log.unavailable-values=keep-current needs a primary key")
    if core.deletion_vectors and (not pk or core.merge_engine != "deduplicate"):
        # a vector marks rows a newer row of the same key replaces: that needs a key, and
        # an engine whose newest row is the whole current value
        raise SchemaError(
            "deletion-vectors.enabled needs a primary key and merge-engine=deduplicate "
            f"(this table: primary key {pk or 'none'}, merge-engine {core.merge_engine!r})"
        )
    fields = []
    for f in schema:
        typ = normalize_type(f.type)
        # primary-key columns can never be null
        fields.append(pa.field(f.name, typ, nullable=f.nullable and f.name not in pk))
    return TableSchema(
        id=0,
        arrow_schema=pa.schema(fields),
        primary_key=pk,
        partition_keys=parts,
        options=opts,
        comment=comment,
        time_millis=int(time.time() * 1000),
    )


def evolve(current: TableSchema, new_schema: pa.Schema) -> TableSchema:
    """The next schema version, or SchemaError when the change could lose data.

    Allowed: appending nullable columns, widening a column's type losslessly
    (int32 -> int64, float32 -> float64, ...), making a column nullable.
    Refused: dropping or renaming columns, narrowing or cross-family type changes,
    changing key columns' types, making a column non-nullable.
    """
    old = current.arrow_schema
    for f in old:
        if f.name not in new_schema.names:
            raise SchemaError(
                f"column {f.name!r} is missing from the new schema (dropping columns is not supported)"
            )
    fields = []
    for f in new_schema:
        typ = normalize_type(f.type)
        if f.name in old.names:
            prev = old.field(f.name)
            if typ != prev.type:
                if f.name in current.primary_key or f.name in current.partition_keys:
                    raise SchemaError(
                        f"column {f.name!r} is a key column: its type {prev.type} cannot change"
                    )
                if not is_lossless_change(prev.type, typ):
                    raise SchemaError(
                        f"column {f.name!r}: changing type {prev.type} -> {typ} could lose data; "
                        "only widening changes (e.g. int32 -> int64) are allowed"
                    )
            nullable = prev.nullable or f.nullable
            if prev.nullable and not f.nullable:
                raise SchemaError(f"column {f.name!r} cannot become non-nullable")
            fields.append(pa.field(f.name, typ, nullable=nullable))
        else:
            if not f.nullable:
                raise SchemaError(
                    f"new column {f.name!r} must be nullable (old rows have no value)"
                )
            if f.name in SYSTEM_COLUMNS or f.name.startswith(KEY_PREFIX):
                raise SchemaError(f"column {f.name!r} uses a reserved system column name")
            fields.append(pa.field(f.name, typ, nullable=True))
    # existing columns keep their position; new ones go at the end
    by_name = {f.name: f for f in fields}
    ordered = [by_name[n] for n in old.names] + [f for f in fields if f.name not in old.names]
    return TableSchema(
        id=current.id + 1,
        arrow_schema=pa.schema(ordered),
        primary_key=current.primary_key,
        partition_keys=current.partition_keys,
        options=current.options,
        comment=current.comment,
        time_millis=int(time.time() * 1000),
    )


# options whose change would make stored files or the log mean something else: the
# buckets files were hashed into, how rows of a key merge, whether commits marked the
# rows they replaced, which topic holds the table's log
FIXED_OPTIONS = frozenset(
    {
        "bucket",
        "bucket-key",
        "merge-engine",
        "deletion-vectors.enabled",
        "aggregation.remove-record-on-delete",
        "log.topic",
    }
)


def with_options(
    current: TableSchema, set_options: Mapping[str, str], unset: Sequence[str] = ()
) -> TableSchema:
    """The next schema version with options set and removed; columns unchanged.

    Raises InvalidOption for an unknown key or a bad value, SchemaError for an option
    fixed at creation (``FIXED_OPTIONS``, ``fields.<column>.*``).
    """
    changes = {str(k): str(v) for k, v in set_options.items()}
    both = sorted(set(changes) & set(unset))
    if both:
        raise SchemaError(f"option {both[0]!r} is both set and removed")
    check_known({**changes, **{k: "" for k in unset}})
    for key in [*changes, *unset]:
        if key in FIXED_OPTIONS or key.startswith("fields."):
            old = current.options.get(key)
            if changes.get(key) == old:
                continue  # setting what is there already changes nothing
            raise SchemaError(
                f"option {key!r} is fixed when the table is created (it decides how stored "
                "files were written); create a new table with it (CREATE TABLE AS SELECT)"
            )
    options = {k: v for k, v in current.options.items() if k not in unset}
    options.update(changes)
    CoreOptions.from_map(options)  # every value valid, as at creation
    return TableSchema(
        id=current.id + 1,
        arrow_schema=current.arrow_schema,
        primary_key=current.primary_key,
        partition_keys=current.partition_keys,
        options=options,
        comment=current.comment,
        time_millis=int(time.time() * 1000),
    )


class SchemaManager:
    """Reads and writes one table's schema versions."""

    def __init__(self, io: FileIO, paths: TablePaths) -> None:
        self.io = io
        self.paths = paths
        # schema id -> (file bytes, parsed version): a version is parsed once; the bytes
        # are compared on each read, so a table replaced under the same path (RTAS) is
        # never served an old parse
        self._parsed: dict[int, tuple[bytes, TableSchema]] = {}

    def list_ids(self) -> list[int]:
        ids = []
        for info in self.io.list_dir(self.paths.schema_dir):
            name = info.base_name
            if name.startswith("schema-") and name[7:].isdigit():
                ids.append(int(name[7:]))
        return sorted(ids)

    def latest(self) -> TableSchema | None:
        ids = self.list_ids()
        return self.schema(ids[-1]) if ids else None

    def schema(self, schema_id: int) -> TableSchema:
        data = self.io.read_bytes(self.paths.schema(schema_id))
        cached = self._parsed.get(schema_id)
        if cached is not None and cached[0] == data:
            return cached[1]
        parsed = TableSchema.from_json(json.loads(data))
        self._parsed[schema_id] = (data, parsed)
        return parsed

    def commit(self, schema: TableSchema) -> bool:
        """Publish a schema version; False if that version exists already."""
        data = json.dumps(schema.to_json(), indent=2).encode()
        return self.io.create_if_absent(self.paths.schema(schema.id), data)
