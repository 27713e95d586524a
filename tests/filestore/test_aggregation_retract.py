"""Aggregation merge engine retractions (Paimon semantics) and refused options, on real
tables: sum takes -U/-D values back, ignore-retract skips them, other functions refuse
them at write, aggregation.remove-record-on-delete removes the key; file.format=orc is
refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from filestore import Catalog
from filestore.errors import InvalidOption, RetractionNotSupported

SCHEMA = pa.schema([("id", pa.int64()), ("n", pa.int64()), ("top", pa.int64())])


def _table(tmp_path: Path, **options: str) -> Any:
    opts = {
        "bucket": "2",
        "merge-engine": "aggregation",
        "fields.n.aggregate-function": "sum",
        "fields.top.aggregate-function": "max",
        "fields.top.ignore-retract": "true",
        **options,
    }
    return Catalog(str(tmp_path)).create_table("db.agg", SCHEMA, primary_key=["id"], options=opts)


def _rows(ids: list[int], ns: list[int | None], kinds: list[str]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "n": pa.array(ns, pa.int64()),
            "top": pa.array(ns, pa.int64()),
            "_row_kind": kinds,
        }
    )


def _state(table: Any, snapshot_id: int | None = None) -> dict[int, tuple[Any, Any]]:
    t = table.read(snapshot_id=snapshot_id)
    return {r["id"]: (r["n"], r["top"]) for r in t.to_pylist()}


def _commit(table: Any, data: pa.Table) -> Any:
    w = table.new_write("u")
    try:
        w.write(data)
        return w.commit()
    finally:
        w.close()


def test_sum_retracts_update_before_and_delete_across_commits(tmp_path: Path) -> None:
    table = _table(tmp_path)
    _commit(table, _rows([1, 2, 3], [10, 20, 30], ["+I", "+I", "+I"]))
    # key 1 changes 10 -> 7; key 2 is deleted (retracted: it stays, summing to 0);
    # key 3 gets only a retraction in this commit; key 4 is new
    snap = _commit(table, _rows([1, 1, 2, 3, 4], [10, 7, 20, 5, 4], ["-U", "+U", "-D", "-U", "+I"]))
    expected = {1: (7, 10), 2: (0, 20), 3: (25, 30), 4: (4, 4)}
    assert _state(table) == expected
    table.compact(full=True)
    assert table.latest_snapshot().id > snap.id
    assert _state(table) == expected  # the compacted table reads the same
    assert _state(table, snap.id) == expected


def test_retractions_in_many_runs_merge_like_one(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"auto-compaction": "false"})
    w = table.new_write("u")
    w.write(_rows([1], [100], ["+I"]))
    w.flush()
    for _ in range(3):  # level-0 runs holding only retractions of key 1
        w.write(_rows([1, 2], [10, 1], ["-U", "-U"]))
        w.flush()
    w.write(_rows([2], [50], ["+U"]))
    w.commit()
    w.close()
    # key 2 was created by its retractions: -1 -1 -1 +50
    assert _state(table) == {1: (70, 100), 2: (47, 50)}
    table.compact(full=True)
    assert _state(table) == {1: (70, 100), 2: (47, 50)}


def test_remove_record_on_delete_removes_the_key(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"aggregation.remove-record-on-delete": "true"})
    _commit(table, _rows([1, 2], [10, 20], ["+I", "+I"]))
    _commit(table, _rows([1, 2, 2], [10, 20, 3], ["-D", "-U", "+U"]))
    assert _state(table) == {2: (3, 20)}
    _commit(table, _rows([1], [5], ["+I"]))  # a deleted key starts from nothing
    assert _state(table) == {1: (5, 5), 2: (3, 20)}


AGG = {"merge-engine": "aggregation", "fields.n.aggregate-function": "sum"}


@pytest.mark.parametrize(
    ("options", "kind"),
    [
        ({**AGG, "fields.top.aggregate-function": "max"}, "-U"),
        ({**AGG, "fields.top.aggregate-function": "max", "fields.top.ignore-retract": "x"}, "-D"),
        ({**AGG, "fields.top.aggregate-function": "first_value"}, "-D"),
        # an unconfigured value column aggregates with last_non_null_value: no retraction
        (AGG, "-U"),
    ],
)
def test_unretractable_function_is_refused_at_write(
    tmp_path: Path, options: dict[str, str], kind: str
) -> None:
    if options.get("fields.top.ignore-retract") == "x":
        with pytest.raises(InvalidOption, match=r"fields\.top\.ignore-retract"):
            Catalog(str(tmp_path)).create_table("db.bad", SCHEMA, options=options)
        options = {**options, "fields.top.ignore-retract": "false"}
    table = Catalog(str(tmp_path)).create_table(
        "db.agg", SCHEMA, primary_key=["id"], options=options
    )
    first = _commit(table, _rows([1], [10], ["+I"]))
    w = table.new_write("u")
    with pytest.raises(RetractionNotSupported, match=r"column 'top' \(\w+\).*ignore-retract"):
        w.write(_rows([2, 1], [1, 10], ["+I", kind]))
    w.commit()  # the refused batch buffered nothing, not even key 2
    w.close()
    assert [s.id for s in table.snapshots()] == [first.id]
    assert _state(table) == {1: (10, 10)}


def test_delete_removing_the_key_needs_no_retraction(tmp_path: Path) -> None:
    table = _table(
        tmp_path,
        **{"fields.top.ignore-retract": "false", "aggregation.remove-record-on-delete": "true"},
    )
    _commit(table, _rows([1, 2], [10, 20], ["+I", "+I"]))
    _commit(table, _rows([1], [None], ["-D"]))  # key only: nothing to retract
    assert _state(table) == {2: (20, 20)}


def test_orc_file_format_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidOption, match=r"'file.format'.*'orc'.*parquet"):
        Catalog(str(tmp_path)).create_table(
            "db.o", SCHEMA, primary_key=["id"], options={"file.format": "orc"}
        )
    with pytest.raises(InvalidOption, match=r"'file.format'.*'avro'.*parquet"):
        Catalog(str(tmp_path)).create_table("db.a", SCHEMA, options={"file.format": "avro"})
