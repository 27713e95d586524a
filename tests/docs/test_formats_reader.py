"""docs/formats.md states what the code writes: its examples and schemas are checked here.

The runnable blocks of formats.md (bucket hash, codec envelopes, the third-party
reader) run in test_code_blocks.py; this file checks the shown-only ```json blocks
(Avro schemas, schema and snapshot examples) against the code, so the page cannot
drift from the format silently.
"""

from __future__ import annotations

import copy
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from filestore import Catalog
from filestore.format.data_file import DATA_FILE_AVRO
from filestore.format.manifest import MANIFEST_ENTRY_AVRO, MANIFEST_FILE_META_AVRO
from filestore.format.schema import TableSchema
from filestore.format.snapshot import Snapshot
from tests.docs.test_code_blocks import extract_blocks

FORMATS = Path(__file__).resolve().parents[2] / "docs" / "formats.md"


def _json_blocks() -> list[Any]:
    return [json.loads(b.code) for b in extract_blocks(FORMATS) if b.lang == "json"]


def _named(name: str) -> dict[str, Any]:
    found = [b for b in _json_blocks() if isinstance(b, dict) and b.get("name") == name]
    assert len(found) == 1, f"formats.md should show the Avro schema {name} once"
    return found[0]


def _fields(schema: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(f["name"], f["type"]) for f in schema["fields"]]


def test_manifest_list_schema_is_the_codes() -> None:
    shown = _named("ManifestFileMeta")
    assert fastavro.parse_schema(shown) == MANIFEST_FILE_META_AVRO


def test_data_file_schema_is_the_codes() -> None:
    assert _fields(_named("DataFileMeta")) == _fields(DATA_FILE_AVRO)


def test_manifest_entry_schema_is_the_codes() -> None:
    shown = copy.deepcopy(_named("ManifestEntry"))
    for f in shown["fields"]:
        if f["type"] == "DataFileMeta":  # shown by reference, defined in its own block
            f["type"] = copy.deepcopy(_named("DataFileMeta"))
    assert fastavro.parse_schema(shown) == MANIFEST_ENTRY_AVRO


def test_snapshot_example_has_every_field(tmp_path: Path) -> None:
    shown = next(b for b in _json_blocks() if isinstance(b, dict) and "commit_user" in b)
    assert list(shown) == [f.name for f in fields(Snapshot)]
    assert Snapshot.from_json(shown).to_json() == shown
    # and it is what a commit with a barrier and offsets writes (values aside)
    table = Catalog(str(tmp_path)).create_table(
        "db.t", pa.schema([("id", pa.int64())]), primary_key=["id"], options={"bucket": "2"}
    )
    w = table.new_write("dts-worker")
    w.write(pa.table({"id": [1, 2, 3]}))
    snap = w.commit(barrier=shown["barrier"], log_offsets={0: 2, 1: 3}, identifier=shown["barrier"])
    w.close()
    assert snap is not None
    written = json.loads(Path(table.paths.snapshot(snap.id)).read_text())
    assert list(written) == list(shown)
    assert written["log_offsets"] == shown["log_offsets"]


def test_schema_example_is_what_create_table_writes(tmp_path: Path) -> None:
    shown = next(b for b in _json_blocks() if isinstance(b, dict) and "primaryKeys" in b)
    table = Catalog(str(tmp_path)).create_table(
        "db.orders",
        pa.schema([("id", pa.int64()), ("region", pa.string()), ("amount", pa.float64())]),
        primary_key=["id"],
        partition_by=["region"],
        options={"bucket": "2"},
    )
    written = json.loads(Path(table.paths.schema(0)).read_text())
    assert {**written, "timeMillis": 0} == {**shown, "timeMillis": 0}
    assert TableSchema.from_json(shown).to_json() == {**shown}


@pytest.mark.parametrize(
    "path",
    ["schema/schema-0", "snapshot/snapshot-1", "snapshot/LATEST", "snapshot/EARLIEST"],
)
def test_tree_names_are_the_codes(tmp_path: Path, path: str) -> None:
    table = Catalog(str(tmp_path)).create_table("db.t", pa.schema([("x", pa.int32())]))
    w = table.new_write("u")
    w.write(pa.table({"x": pa.array([1], pa.int32())}))
    w.commit()
    w.close()
    assert (Path(table.paths.root) / path).is_file()
    shown = path.replace("-0", "-<N>").replace("-1", "-<N>")
    assert shown in FORMATS.read_text(), f"formats.md's tree should name {shown}"
