"""Catalog, schema, bad input, schema evolution, projection, filters and pruning."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from filestore import Catalog, SchemaError, SnapshotNotFound, TableAlreadyExists, TableNotFound
from filestore.errors import InvalidOption

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("dt", pa.string()),
        ("amount", pa.int64()),
        pa.field("name", pa.string(), nullable=False),
    ]
)


@pytest.fixture
def orders(warehouse: Path):  # type: ignore[no-untyped-def]
    return Catalog(str(warehouse)).create_table(
        "db.orders", SCHEMA, primary_key=["id"], partition_by=["dt"], options={"bucket": "4"}
    )


def _rows(**cols: list) -> pa.Table:  # type: ignore[type-arg]
    return pa.table(cols)


def test_catalog_lifecycle(warehouse: Path) -> None:
    cat = Catalog(str(warehouse))
    cat.create_table("db.a", SCHEMA, primary_key=["id"])
    cat.create_table("b", SCHEMA)
    assert cat.list_tables() == ["db.a", "default.b"]
    assert cat.list_databases() == ["db", "default"]
    with pytest.raises(TableAlreadyExists, match=r"db\.a"):
        cat.create_table("db.a", SCHEMA)
    assert cat.create_table("db.a", SCHEMA, ignore_if_exists=True).name == "db.a"
    with pytest.raises(TableNotFound, match=r"db\.missing"):
        cat.get_table("db.missing")
    cat.rename_table("db.a", "db.c")
    assert cat.list_tables("db") == ["db.c"]
    cat.drop_table("db.c")
    assert cat.list_tables("db") == []
    with pytest.raises(TableNotFound):
        cat.drop_table("db.c")
    # a URI works as well as a path
    assert Catalog(f"file://{warehouse}").list_tables() == ["default.b"]


def test_schema_file_round_trip(orders) -> None:  # type: ignore[no-untyped-def]
    s = orders.schema
    assert (
        s.id == 0 and s.primary_key == ["id"] and s.partition_keys == ["dt"] and s.num_buckets == 4
    )
    assert s.arrow_schema == SCHEMA
    assert (Path(orders.paths.root) / "schema" / "schema-0").exists()


def test_bad_table_definitions(warehouse: Path) -> None:
    cat = Catalog(str(warehouse))
    with pytest.raises(SchemaError, match="'nope'"):
        cat.create_table("db.x", SCHEMA, primary_key=["nope"])
    with pytest.raises(SchemaError, match="'_VALUE_KIND'"):
        cat.create_table("db.x", pa.schema([("_VALUE_KIND", pa.int8())]))
    with pytest.raises(InvalidOption, match="merge-engine"):
        cat.create_table("db.x", SCHEMA, primary_key=["id"], options={"merge-engine": "magic"})
    with pytest.raises(SchemaError, match="needs a primary key"):
        cat.create_table("db.x", SCHEMA, options={"merge-engine": "first-row"})
    with pytest.raises(SchemaError, match="keep-current needs a primary key"):
        cat.create_table("db.x", SCHEMA, options={"log.unavailable-values": "keep-current"})
    with pytest.raises(InvalidOption, match="refuse, keep-current"):
        cat.create_table("db.x", SCHEMA, options={"log.unavailable-values": "keep"})
    assert cat.list_tables() == []


@pytest.mark.parametrize(
    ("data", "column"),
    [
        ({"id": ["x"], "dt": ["a"], "amount": [1], "name": ["n"]}, "'id'"),  # wrong type
        ({"id": [1], "dt": ["a"], "amount": [1], "name": ["n"], "extra": [1]}, "'extra'"),
        ({"dt": ["a"], "amount": [1], "name": ["n"]}, "'id'"),  # missing key column
        ({"id": [1], "amount": [1], "name": ["n"]}, "'dt'"),  # missing partition column
        ({"id": [1, None], "dt": ["a", "a"], "amount": [1, 2], "name": ["n", "m"]}, "'id'"),
        ({"id": [1], "dt": ["a"], "amount": [1]}, "'name'"),  # missing non-nullable
        ({"id": [1], "dt": ["a"], "amount": [1], "name": [None]}, "'name'"),
        (
            {"id": [1], "dt": ["a"], "amount": [1], "name": ["n"], "_row_kind": ["+X"]},
            "'_row_kind'",
        ),
        ({"id": [1], "dt": ["a"], "amount": [2**40], "name": ["n"]}, None),  # fits: accepted
    ],
)
def test_bad_input_names_the_column_and_writes_nothing(orders, data, column) -> None:  # type: ignore[no-untyped-def]
    w = orders.new_write("u")
    w.write(pa.table({"id": [7], "dt": ["a"], "amount": [1], "name": ["ok"]}))
    if column is None:
        w.write(pa.table(data))
        return
    with pytest.raises(SchemaError, match=column):
        w.write(pa.table(data))
    w.close()
    assert orders.latest_snapshot() is None
    assert not list(Path(orders.paths.root).rglob("*.parquet"))


def test_bad_input_midway_keeps_earlier_rows_only(orders) -> None:  # type: ignore[no-untyped-def]
    w = orders.new_write("u")
    w.write(pa.table({"id": [1], "dt": ["a"], "amount": [1], "name": ["ok"]}))
    with pytest.raises(SchemaError, match="'amount'"):
        w.write(pa.table({"id": [2], "dt": ["a"], "amount": ["not a number"], "name": ["x"]}))
    w.commit()
    assert orders.read().column("id").to_pylist() == [1]


def test_narrowing_input_is_checked(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table(
        "db.n", pa.schema([("id", pa.int32())]), primary_key=["id"]
    )
    w = t.new_write("u")
    w.write(pa.table({"id": pa.array([1, 2], pa.int64())}))  # values fit int32
    with pytest.raises(SchemaError, match="'id'"):
        w.write(pa.table({"id": pa.array([2**40], pa.int64())}))


def test_delete_rows_need_only_the_key(orders) -> None:  # type: ignore[no-untyped-def]
    w = orders.new_write("u")
    w.write(pa.table({"id": [1, 2], "dt": ["a", "a"], "amount": [1, 2], "name": ["x", "y"]}))
    w.commit()
    w.write(
        pa.table(
            {"id": [1], "dt": ["a"], "name": pa.array([None], pa.string()), "_row_kind": ["-D"]}
        )
    )
    w.commit()
    assert orders.read().column("id").to_pylist() == [2]


def test_schema_evolution(orders) -> None:  # type: ignore[no-untyped-def]
    w = orders.new_write("u")
    w.write(pa.table({"id": [1], "dt": ["a"], "amount": [5], "name": ["x"]}))
    w.commit()
    s1 = orders.add_column("note", pa.string())
    assert s1.id == 1 and orders.schema.arrow_schema.names[-1] == "note"
    wider = orders.schema.arrow_schema.set(2, pa.field("amount", pa.decimal128(30, 2)))
    orders.evolve_schema(wider)
    w2 = orders.new_write("u")
    w2.write(pa.table({"id": [2], "dt": ["a"], "amount": [7], "name": ["y"], "note": ["hi"]}))
    w2.commit()
    rows = sorted(orders.read().to_pylist(), key=lambda r: r["id"])
    assert [r["note"] for r in rows] == [None, "hi"]  # old file reads the new column as null
    assert str(rows[0]["amount"]) == "5.00"
    # old snapshot, new schema: still readable
    assert orders.read(snapshot_id=1).column("note").to_pylist() == [None]
    with pytest.raises(SchemaError, match=r"'amount'.*could lose data"):
        orders.evolve_schema(orders.schema.arrow_schema.set(2, pa.field("amount", pa.int32())))
    with pytest.raises(SchemaError, match="'name'"):
        orders.evolve_schema(orders.schema.arrow_schema.set(3, pa.field("name", pa.int64())))
    with pytest.raises(SchemaError, match="'id'"):
        orders.evolve_schema(orders.schema.arrow_schema.set(0, pa.field("id", pa.int32())))
    with pytest.raises(SchemaError, match="must be nullable"):
        orders.evolve_schema(orders.schema.arrow_schema.append(pa.field("z", pa.int8(), False)))
    with pytest.raises(SchemaError, match=r"'note'.*missing"):
        orders.evolve_schema(orders.schema.arrow_schema.remove(4))


def test_int64_to_int32_refused_and_widening_allowed(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table(
        "db.w",
        pa.schema([("k", pa.int64()), ("x", pa.int32()), ("f", pa.float32())]),
        primary_key=["k"],
    )
    t.evolve_schema(pa.schema([("k", pa.int64()), ("x", pa.int64()), ("f", pa.float64())]))
    assert t.schema.arrow_schema.field("x").type == pa.int64()
    with pytest.raises(SchemaError, match="'x'"):
        t.evolve_schema(pa.schema([("k", pa.int64()), ("x", pa.int32()), ("f", pa.float64())]))
    with pytest.raises(SchemaError, match="'f'"):
        t.evolve_schema(pa.schema([("k", pa.int64()), ("x", pa.int64()), ("f", pa.string())]))


def test_projection_filter_and_pruning(orders) -> None:  # type: ignore[no-untyped-def]
    w = orders.new_write("u")
    ids = list(range(100))
    w.write(
        pa.table(
            {
                "id": ids,
                "dt": ["a" if i < 50 else "b" for i in ids],
                "amount": ids,
                "name": [f"n{i}" for i in ids],
            }
        )
    )
    w.commit()
    all_splits = orders.new_scan().plan()
    assert len(all_splits) == 8  # 2 partitions x 4 buckets
    part = orders.new_scan(filter=pc.field("dt") == "b").plan()
    assert {s.partition["dt"] for s in part} == {"b"} and len(part) == 4
    key = orders.new_scan(filter=pc.field("id") == 3).plan()
    assert {s.partition["dt"] for s in key} == {"a"}  # key ranges skip partition b's files
    assert orders.new_scan(filter=pc.field("id") > 1000).plan() == []
    # a value column never prunes a primary-key table (older versions could resurface)
    assert len(orders.new_scan(filter=pc.field("amount") == 3).plan()) == 8
    got = orders.read(columns=["name"], filter=(pc.field("amount") >= 97))
    assert got.schema.names == ["name"] and sorted(got.column("name").to_pylist()) == [
        "n97",
        "n98",
        "n99",
    ]
    # reading splits one by one gives the same rows as read()
    rows = [r for s in all_splits for b in orders.read_split(s) for r in b.to_pylist()]
    assert len(rows) == 100
    with pytest.raises(SchemaError, match="'nope'"):
        orders.read(columns=["nope"])
    with pytest.raises(SnapshotNotFound):
        orders.read(snapshot_id=42)


def test_append_table_pruning_uses_value_stats(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table("db.log", pa.schema([("x", pa.int64())]))
    w = t.new_write("u")
    for lo in (0, 100, 200):
        w.write(pa.table({"x": list(range(lo, lo + 10))}))
        w.commit()
    scan = t.new_scan(filter=pc.field("x") > 150)
    assert sum(len(s.files) for s in scan.plan()) == 1
    assert sorted(t.read(filter=pc.field("x") > 205).column("x").to_pylist()) == [
        206,
        207,
        208,
        209,
    ]


def test_table_handle_sees_other_handles_commits(warehouse: Path) -> None:
    cat = Catalog(str(warehouse))
    t1 = cat.create_table("db.t", pa.schema([("k", pa.int64())]), primary_key=["k"])
    t2 = cat.get_table("db.t")
    assert t2.latest_snapshot() is None
    w = t1.new_write("u")
    w.write(pa.table({"k": [1]}))
    w.commit()
    assert t2.latest_snapshot().id == 1  # type: ignore[union-attr]
    t1.add_column("v", pa.int64())
    assert t2.schema.id == 1


def test_split_is_picklable(orders) -> None:  # type: ignore[no-untyped-def]
    import pickle

    w = orders.new_write("u")
    w.write(pa.table({"id": [1], "dt": ["a"], "amount": [1], "name": ["x"]}))
    w.commit()
    (split,) = orders.new_scan().plan()
    again = pickle.loads(pickle.dumps(split))
    assert again == split
    assert [b.num_rows for b in orders.read_split(again)] == [1]


def test_many_commits_merge_manifests(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table(
        "db.m",
        pa.schema([("k", pa.int64()), ("v", pa.int64())]),
        primary_key=["k"],
        options={"manifest.merge-min-count": "3", "bucket": "2"},
    )
    w = t.new_write("u")
    for i in range(8):
        w.write(pa.table({"k": [i % 3, 10 + i], "v": [i, i]}))
        w.commit()
    rows = dict(zip(*t.read().to_pydict().values(), strict=True))
    assert rows[0] == 6 and rows[1] == 7 and rows[2] == 5 and len(rows) == 11
    latest = t.latest_snapshot()
    assert latest is not None and len(t.manifest_store.read_list(latest.base_manifest_list)) < 3


def test_nanosecond_timestamps_as_keys_and_values(tmp_path: Path) -> None:
    """Statistics and key ranges keep nanoseconds that are not whole microseconds (their
    Python form would refuse them), and overlapping files merge on them."""
    ns = pa.timestamp("ns", tz="UTC")
    schema = pa.schema([pa.field("at", ns, nullable=False), pa.field("seen", ns)])
    t = Catalog(str(tmp_path)).create_table(
        "db.ns", schema, primary_key=["at"], options={"bucket": "1"}
    )
    for seen in (1, 2):
        w = t.new_write("w")
        w.write(pa.table({"at": [-5, 1, 3_000_000_001], "seen": [seen * 7 + 1] * 3}, schema=schema))
        w.commit()
        w.close()
    got = t.read().sort_by("at")
    assert got.equals(pa.table({"at": [-5, 1, 3_000_000_001], "seen": [15] * 3}, schema=schema))
