"""Iceberg format-version 2 manifests and manifest lists (Avro, fastavro), as the spec
defines them: readers resolve their fields by ``field-id``."""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import fastavro

#: manifest entry status: EXISTING (the file was added by an earlier snapshot or this one)
EXISTING = 1
DATA, POSITION_DELETES = 0, 1  # data_file.content, and a manifest's content
#: Iceberg's reserved field ids of a position delete file's columns
DELETE_FILE_PATH_ID = 2147483546
DELETE_POS_ID = 2147483545


def _opt(name: str, typ: Any, field_id: int) -> dict[str, Any]:
    return {"name": name, "type": ["null", typ], "default": None, "field-id": field_id}


def _req(name: str, typ: Any, field_id: int) -> dict[str, Any]:
    return {"name": name, "type": typ, "field-id": field_id}


def _bounds(name: str, field_id: int, key_id: int, value_id: int) -> dict[str, Any]:
    pair = {
        "type": "record",
        "name": f"k{key_id}_v{value_id}",
        "fields": [_req("key", "int", key_id), _req("value", "bytes", value_id)],
    }
    return _opt(name, {"type": "array", "items": pair, "logicalType": "map"}, field_id)


def entry_schema(partition_fields: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``manifest_entry`` Avro schema for a partition spec's fields (``r102``)."""
    data_file = {
        "type": "record",
        "name": "r2",
        "fields": [
            _req("content", "int", 134),
            _req("file_path", "string", 100),
            _req("file_format", "string", 101),
            _req("partition", {"type": "record", "name": "r102", "fields": partition_fields}, 102),
            _req("record_count", "long", 103),
            _req("file_size_in_bytes", "long", 104),
            _bounds("lower_bounds", 125, 126, 127),
            _bounds("upper_bounds", 128, 129, 130),
            _opt("referenced_data_file", "string", 143),
        ],
    }
    return {
        "type": "record",
        "name": "manifest_entry",
        "fields": [
            _req("status", "int", 0),
            _opt("snapshot_id", "long", 1),
            _opt("sequence_number", "long", 3),
            _opt("file_sequence_number", "long", 4),
            _req("data_file", data_file, 2),
        ],
    }


MANIFEST_FILE_SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "manifest_file",
        "fields": [
            _req("manifest_path", "string", 500),
            _req("manifest_length", "long", 501),
            _req("partition_spec_id", "int", 502),
            _req("content", "int", 517),
            _req("sequence_number", "long", 515),
            _req("min_sequence_number", "long", 516),
            _req("added_snapshot_id", "long", 503),
            _req("added_files_count", "int", 504),
            _req("existing_files_count", "int", 505),
            _req("deleted_files_count", "int", 506),
            _req("added_rows_count", "long", 512),
            _req("existing_rows_count", "long", 513),
            _req("deleted_rows_count", "long", 514),
        ],
    }
)


@dataclass(frozen=True)
class FileEntry:
    """One data or position-delete file of a snapshot."""

    content: int  # DATA or POSITION_DELETES
    path: str
    partition: dict[str, Any]  # partition field name -> typed value
    record_count: int
    size: int
    sequence_number: int
    referenced: str | None = None  # the data file a position delete file applies to


@dataclass(frozen=True)
class Manifest:
    path: str
    length: int
    content: int
    files: int
    rows: int
    min_sequence_number: int


def write_manifest(
    path: str,
    entries: Sequence[FileEntry],
    content: int,
    snapshot_id: int,
    spec: dict[str, Any],
) -> tuple[bytes, Manifest]:
    """The manifest's bytes (to be written at ``path``) and its manifest-list entry."""
    records = [_entry(e, snapshot_id) for e in entries]
    meta = {
        "schema": json.dumps(spec["schema"]),
        "schema-id": str(spec["schema"]["schema-id"]),
        "partition-spec": json.dumps(spec["partition-spec"]),
        "partition-spec-id": "0",
        "format-version": "2",
        "content": "deletes" if content == POSITION_DELETES else "data",
    }
    buf = io.BytesIO()
    schema = _parsed_entry_schema(json.dumps(spec["avro-partition-fields"]))
    fastavro.writer(buf, schema, records, metadata=meta, codec="deflate")
    data = buf.getvalue()
    seqs = [e.sequence_number for e in entries]
    return data, Manifest(
        path, len(data), content, len(entries), sum(e.record_count for e in entries), min(seqs)
    )


@functools.lru_cache(maxsize=16)
def _parsed_entry_schema(partition_fields: str) -> Any:
    """``entry_schema`` parsed, once per partition spec (its fields as JSON): a commit
    writes two manifests, and building and parsing the schema was a third of each."""
    return fastavro.parse_schema(entry_schema(json.loads(partition_fields)))


def _entry(e: FileEntry, snapshot_id: int) -> dict[str, Any]:
    bounds = None
    if e.referenced is not None:  # lets readers match the deletes to their one data file
        bounds = [{"key": DELETE_FILE_PATH_ID, "value": e.referenced.encode()}]
    return {
        "status": EXISTING,
        "snapshot_id": snapshot_id,
        "sequence_number": e.sequence_number,
        "file_sequence_number": e.sequence_number,
        "data_file": {
            "content": e.content,
            "file_path": e.path,
            "file_format": "PARQUET",
            "partition": e.partition,
            "record_count": e.record_count,
            "file_size_in_bytes": e.size,
            "lower_bounds": bounds,
            "upper_bounds": bounds,
            "referenced_data_file": e.referenced,
        },
    }


def write_manifest_list(
    manifests: Sequence[Manifest], snapshot_id: int, parent_id: int | None, sequence: int
) -> bytes:
    records = [
        {
            "manifest_path": m.path,
            "manifest_length": m.length,
            "partition_spec_id": 0,
            "content": m.content,
            "sequence_number": sequence,
            "min_sequence_number": m.min_sequence_number,
            "added_snapshot_id": snapshot_id,
            "added_files_count": 0,
            "existing_files_count": m.files,
            "deleted_files_count": 0,
            "added_rows_count": 0,
            "existing_rows_count": m.rows,
            "deleted_rows_count": 0,
        }
        for m in manifests
    ]
    meta = {
        "snapshot-id": str(snapshot_id),
        "parent-snapshot-id": "null" if parent_id is None else str(parent_id),
        "sequence-number": str(sequence),
        "format-version": "2",
    }
    buf = io.BytesIO()
    fastavro.writer(buf, MANIFEST_FILE_SCHEMA, records, metadata=meta, codec="deflate")
    return buf.getvalue()


def delete_paths(manifest: bytes) -> set[str]:
    """The files a manifest names (to keep the position delete files still named)."""
    records: list[dict[str, Any]] = list(fastavro.reader(io.BytesIO(manifest)))  # type: ignore[arg-type]
    return {str(r["data_file"]["file_path"]) for r in records}
