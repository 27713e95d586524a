"""Names that become paths or topics, table options and schema text are checked where they enter."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from bridge.cli import cli
from filestore import Catalog, InvalidIdentifier, InvalidOption
from filestore.errors import TagError
from filestore.format.options import KNOWN_OPTIONS

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def _files_outside(root: Path, warehouse: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and warehouse not in p.parents]


def test_partition_column_cannot_escape_the_warehouse(tmp_path: Path) -> None:
    warehouse = tmp_path / "a" / "b" / "c" / "warehouse"
    warehouse.mkdir(parents=True)
    evil = "../../../escaped"
    schema = pa.schema([("id", pa.int64()), (evil, pa.string())])
    with pytest.raises(InvalidIdentifier, match=r"partition column name '\.\./\.\./\.\./escaped'"):
        Catalog(str(warehouse)).create_table("db.t", schema, partition_by=[evil])
    r = CliRunner().invoke(
        cli,
        [
            "table",
            "create",
            "db.t",
            "--schema",
            f"id:int64,{evil}:string",
            "-p",
            evil,
            "--warehouse",
            str(warehouse),
        ],
    )
    assert r.exit_code != 0 and "partition column name" in r.output and "[A-Za-z0-9_]" in r.output
    assert _files_outside(tmp_path, warehouse) == []
    assert Catalog(str(warehouse)).list_tables() == []


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("my db.my table", "database"),
        ("db.t;rm -rf", "table"),
        ("é.tablé", "database"),
        ("db.tablé", "table"),
        ("../x.t", "table"),
        ("db..t", "table"),
        ("db._hidden", "table"),
    ],
)
def test_table_names_must_be_paths_and_topics(warehouse: Path, name: str, kind: str) -> None:
    with pytest.raises(InvalidIdentifier, match=rf"{kind} name .*\[A-Za-z0-9\]\[A-Za-z0-9_-\]\*"):
        Catalog(str(warehouse)).create_table(name, SCHEMA)
    assert not any(warehouse.iterdir())


def test_bucket_key_tag_and_topic_names(warehouse: Path) -> None:
    cat = Catalog(str(warehouse))
    schema = pa.schema([("id", pa.int64()), ("a b", pa.string())])
    with pytest.raises(InvalidIdentifier, match="bucket-key column name 'a b'"):
        cat.create_table("db.t", schema, options={"bucket-key": "a b", "bucket": "2"})
    with pytest.raises(InvalidIdentifier, match=r"topic name 'my topic'.*\[A-Za-z0-9._-\]"):
        cat.create_table("db.t", SCHEMA, options={"log.topic": "my topic"})
    t = cat.create_table("db.t", SCHEMA, primary_key=["id"], options={"log.topic": "orders.v1"})
    w = t.new_write("u")
    w.write(pa.table({"id": pa.array([1], pa.int64()), "v": ["a"]}))
    w.commit()
    for bad in ("../../x", "a/b", "", "12"):
        with pytest.raises(TagError):
            t.create_tag(bad)
    t.create_tag("v-1.0")
    assert [n for n, _ in t.list_tags()] == ["v-1.0"]


def test_unknown_options_are_refused_with_a_suggestion(warehouse: Path) -> None:
    cat = Catalog(str(warehouse))
    with pytest.raises(
        InvalidOption, match=r"unknown table option 'bukcet'; did you mean 'bucket'"
    ):
        cat.create_table("db.t", SCHEMA, primary_key=["id"], options={"bukcet": "4"})
    r = CliRunner().invoke(
        cli,
        [
            "table",
            "create",
            "db.t",
            "--schema",
            "id:int64 not null,v:string",
            "-k",
            "id",
            "-o",
            "buckets=2",
            "--warehouse",
            str(warehouse),
        ],
    )
    assert r.exit_code != 0 and "unknown table option 'buckets'; did you mean 'bucket'" in r.output
    assert cat.list_tables() == []
    # every known option and per-field option is accepted
    t = cat.create_table(
        "db.ok",
        pa.schema([("id", pa.int64()), ("n", pa.int64())]),
        primary_key=["id"],
        options={
            "merge-engine": "aggregation",
            "fields.n.aggregate-function": "sum",
            "fields.n.ignore-retract": "true",
            "log.replication-factor": "1",
            "log.min-insync-replicas": "1",
        },
    )
    assert t.options.aggregate_function("n") == "sum"
    assert {"bucket", "log.topic", "changelog-producer"} <= KNOWN_OPTIONS


def test_schema_text_with_an_empty_entry_is_refused(warehouse: Path) -> None:
    runner = CliRunner()
    wh = ["--warehouse", str(warehouse)]
    for schema in ("id:int64 not null,,name:string", "id:int64,", ",id:int64"):
        r = runner.invoke(cli, ["table", "create", "db.t", "--schema", schema, *wh])
        assert r.exit_code != 0 and "is empty" in r.output, (schema, r.output)
    r = runner.invoke(cli, ["table", "create", "db.t", "--schema", "id:int64", "-k", "id,,", *wh])
    assert r.exit_code != 0 and "--primary-key" in r.output
    assert Catalog(str(warehouse)).list_tables() == []
    # a comma inside a type's parentheses is part of the type
    r = runner.invoke(
        cli, ["table", "create", "db.t", "--schema", "id:int64,price:decimal(10,2)", *wh]
    )
    assert r.exit_code == 0, r.output
    t = Catalog(str(warehouse)).get_table("db.t")
    assert t.arrow_schema.field("price").type == pa.decimal128(10, 2)


def test_chosen_sequence_numbers_must_rise_and_the_last_row_numbered_wins(tmp_path: Path) -> None:
    import numpy as np

    from filestore.errors import FileStoreError

    t = Catalog(str(tmp_path)).create_table("db.seq", SCHEMA, primary_key=["id"])
    w = t.new_write("w")
    rows = pa.table({"id": [1, 1], "v": ["old", "new"]})
    with pytest.raises(FileStoreError, match="must increase"):
        w.write(rows, sequence_numbers=np.array([5, 5]))
    with pytest.raises(FileStoreError, match="2 sequence numbers for 1 rows"):
        w.write(rows.slice(0, 1), sequence_numbers=np.array([5, 6]))
    w.write(rows, sequence_numbers=np.array([10, 20]))
    with pytest.raises(FileStoreError, match="from 21 on"):  # below what it gave out
        w.write(rows.slice(0, 1), sequence_numbers=np.array([15]))
    w.commit()
    assert t.read().to_pylist() == [{"id": 1, "v": "new"}]
