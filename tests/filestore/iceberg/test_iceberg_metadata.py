"""The Iceberg metadata dts writes beside a table (``metadata.iceberg.storage``): written
at every commit, never failing one, following expiration and schema changes, bounded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from filestore import Catalog, Table
from filestore.errors import InvalidOption, SchemaError
from filestore.iceberg.sync import KEEP_VERSIONS, IcebergSync
from tests.filestore.test_stored_changelog import _rows

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("n", pa.int64())]
)
ICEBERG = {"metadata.iceberg.storage": "table-location", "deletion-vectors.enabled": "true"}


def _table(warehouse: Path, options: dict[str, str] | None = None) -> Table:
    return Catalog(str(warehouse)).create_table(
        "db.t", SCHEMA, primary_key=["id"], options=ICEBERG if options is None else options
    )


def _commit(t: Table, ids: list[int], tag: str = "x") -> None:
    w = t.new_write("w")
    w.write(_rows(ids, tag))
    w.commit()
    w.close()


def _metadata(t: Table) -> dict[str, Any]:
    sync = IcebergSync(t)
    version = sync.current_version()
    assert version is not None
    data: dict[str, Any] = json.loads(t.io.read_bytes(sync.metadata_path(version)))
    return data


def _named_files(t: Table, meta: dict[str, Any]) -> list[str]:
    """Every file the metadata names, through its manifest lists and manifests."""
    named = []
    for snap in meta["snapshots"]:
        named.append(snap["manifest-list"])
        with open(snap["manifest-list"], "rb") as f:
            for m in fastavro.reader(f):
                named.append(m["manifest_path"])  # type: ignore[call-overload,index]
                with open(m["manifest_path"], "rb") as mf:  # type: ignore[call-overload,index]
                    named += [e["data_file"]["file_path"] for e in fastavro.reader(mf)]  # type: ignore[call-overload,index]
    return named


def test_off_by_default_and_the_option_is_checked(warehouse: Path) -> None:
    t = _table(warehouse, {})
    _commit(t, [1, 2])
    assert not Path(t.paths.root, "metadata").exists()
    with pytest.raises(InvalidOption, match=r"metadata\.iceberg\.storage"):
        Catalog(str(warehouse)).create_table(
            "db.bad", SCHEMA, options={"metadata.iceberg.storage": "somewhere"}
        )


def test_every_commit_writes_a_version_naming_the_retained_snapshots(warehouse: Path) -> None:
    t = _table(warehouse)
    for i in range(3):
        _commit(t, list(range(i, i + 5)))
    meta = _metadata(t)
    assert Path(t.paths.root, "metadata", "version-hint.text").read_text() == "3"
    assert [s["snapshot-id"] for s in meta["snapshots"]] == [s.id for s in t.snapshots()]
    assert meta["current-snapshot-id"] == meta["refs"]["main"]["snapshot-id"] == 3
    assert meta["schemas"][-1]["identifier-field-ids"] == [1]
    assert all(Path(p).exists() for p in _named_files(t, meta))


def test_a_failure_never_fails_the_commit_and_the_next_commit_catches_up(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    t = _table(warehouse)
    _commit(t, [1, 2])

    def broken(self: IcebergSync, earliest: int | None = None) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(IcebergSync, "sync", broken)
        _commit(t, [3])  # the dts commit stands
    assert t.read().num_rows == 3
    assert "Iceberg metadata not written" in caplog.text and "No space left" in caplog.text
    assert _metadata(t)["current-snapshot-id"] == 1  # behind, until the next commit
    _commit(t, [4])
    meta = _metadata(t)
    assert [s["snapshot-id"] for s in meta["snapshots"]] == [1, 2, 3]


def test_field_ids_stay_when_a_column_is_added_and_files_map_by_name(warehouse: Path) -> None:
    t = _table(warehouse)
    _commit(t, [1])
    before = _metadata(t)["schemas"][-1]["fields"]
    t.add_column("extra", pa.int64())
    _commit(t, [2])
    meta = _metadata(t)
    after = meta["schemas"][-1]["fields"]
    assert after[: len(before)] == before
    assert after[-1] == {"id": 4, "name": "extra", "required": False, "type": "long"}
    mapping = json.loads(meta["properties"]["schema.name-mapping.default"])
    names = {m["names"][0]: m["field-id"] for m in mapping}
    assert {k: names[k] for k in ("id", "v", "n", "extra")} == {"id": 1, "v": 2, "n": 3, "extra": 4}
    # dts's own columns in its files map to ids no schema uses (readers that map every
    # column of a file need them)
    assert {"_KEY_id", "_SEQUENCE_NUMBER", "_VALUE_KIND"} <= set(names)
    assert min(names[k] for k in ("_KEY_id", "_SEQUENCE_NUMBER", "_VALUE_KIND")) > 1_000_000


def test_expiration_and_orphan_cleanup_keep_the_metadata_whole_and_bounded(
    warehouse: Path,
) -> None:
    t = _table(warehouse)
    for i in range(KEEP_VERSIONS + 5):
        _commit(t, list(range(i, i + 3)), f"s{i}-")
    t.create_tag("kept", 2)
    t.expire(retain_min=2, retain_max=2)
    meta = _metadata(t)
    retained = [s.id for s in t.snapshots()]
    assert [s["snapshot-id"] for s in meta["snapshots"]] == [2, *retained]  # and the tag's
    assert meta["refs"]["kept"] == {"snapshot-id": 2, "type": "tag"}
    t.remove_orphans(older_than_ms=0)
    assert all(Path(p).exists() for p in _named_files(t, meta))
    listing = sorted(p.name for p in Path(t.paths.root, "metadata").iterdir())
    versions = [n for n in listing if n.endswith(".metadata.json")]
    assert len(versions) == KEEP_VERSIONS  # older versions go
    lists = [n for n in listing if n.startswith("snap-")]
    assert lists == sorted(f"snap-{i}-dts.avro" for i in [2, *retained])  # expired ones go


def test_describe_says_where_the_iceberg_metadata_stands(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from bridge.cli import cli

    t = _table(warehouse, {"metadata.iceberg.storage": "table-location"})  # no vectors
    _commit(t, [1, 2])

    def describe() -> str:
        args = ["table", "describe", "db.t", "--warehouse", str(warehouse)]
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 0, r.output
        return " ".join(r.output.split())

    assert "at snapshot 1, up to date" in describe()
    assert "only buckets that need no merge are shown" in describe()
    with monkeypatch.context() as m:
        m.setattr(IcebergSync, "sync", lambda self, earliest=None: None)
        _commit(t, [3])
    assert "at snapshot 1, behind dts's 2: the next commit catches up" in describe()


def test_options_are_altered_on_an_existing_table_and_fixed_ones_refused(warehouse: Path) -> None:
    t = _table(warehouse, {"deletion-vectors.enabled": "true"})
    _commit(t, [1, 2])
    schema = t.set_options({"snapshot.num-retained.min": "3"})
    assert schema.id == 1 and t.schema.options["snapshot.num-retained.min"] == "3"
    assert t.schema.arrow_schema == SCHEMA.set(0, SCHEMA.field("id"))  # columns unchanged
    t.set_options(unset=["snapshot.num-retained.min"])
    assert "snapshot.num-retained.min" not in t.schema.options
    with pytest.raises(SchemaError, match=r"'bucket' is fixed when the table is created"):
        t.set_options({"bucket": "4"})
    with pytest.raises(SchemaError, match=r"deletion-vectors\.enabled"):
        t.set_options(unset=["deletion-vectors.enabled"])
    with pytest.raises(InvalidOption, match=r"did you mean 'metadata\.iceberg\.storage'"):
        t.set_options({"metadata.iceberg.storag": "table-location"})
    with pytest.raises(InvalidOption, match=r"metadata\.iceberg\.storage"):
        t.set_options({"metadata.iceberg.storage": "elsewhere"})
    t.set_options({"deletion-vectors.enabled": "true"})  # as it is: allowed, a no-op
    assert t.schema.id == 2 and t.read().num_rows == 2  # and no new version


def test_turning_iceberg_on_writes_the_current_snapshot_and_off_removes_it(
    warehouse: Path,
) -> None:
    from click.testing import CliRunner

    from bridge.cli import cli

    t = _table(warehouse, {"deletion-vectors.enabled": "true"})
    _commit(t, [1, 2])
    _commit(t, [2, 3])
    args = ["table", "alter", "db.t", "--set", "metadata.iceberg.storage=table-location"]
    r = CliRunner().invoke(cli, [*args, "--warehouse", str(warehouse)])
    assert r.exit_code == 0, r.output
    assert "at snapshot 2, up to date" in " ".join(r.output.split())
    meta = _metadata(t)  # written at once, not at the next commit
    assert [s["snapshot-id"] for s in meta["snapshots"]] == [1, 2]
    assert all(Path(p).exists() for p in _named_files(t, meta))
    _commit(t, [4])
    assert _metadata(t)["current-snapshot-id"] == 3
    args = ["table", "alter", "db.t", "--unset", "metadata.iceberg.storage"]
    r = CliRunner().invoke(cli, [*args, "--warehouse", str(warehouse)])
    assert r.exit_code == 0, r.output
    assert not Path(t.paths.root, "metadata").exists()  # no reader is shown an old table
    _commit(t, [5])
    assert not Path(t.paths.root, "metadata").exists()
    r = CliRunner().invoke(cli, ["table", "alter", "db.t", "--warehouse", str(warehouse)])
    assert r.exit_code != 0 and "give --set key=value or --unset key" in r.output
