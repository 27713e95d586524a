"""Model-based tests: random upserts, deletes, partial rows, flushes and commits across
partitions and buckets, read back at every snapshot and compared with a plain-Python oracle."""

from __future__ import annotations

import tempfile
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from filestore import Catalog

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("a", pa.int64()), ("b", pa.string())])
ENGINES: dict[str, dict[str, str]] = {
    "deduplicate": {},
    "first-row": {"merge-engine": "first-row"},
    "partial-update": {"merge-engine": "partial-update"},
    # aggregation: -U retracts (sum subtracts, ignore-retract skips); -D retracts
    # too, or removes the key with aggregation.remove-record-on-delete
    "agg-sum-max": {
        "merge-engine": "aggregation",
        "fields.a.aggregate-function": "sum",
        "fields.b.aggregate-function": "max",
        "fields.b.ignore-retract": "true",
        "aggregation.remove-record-on-delete": "true",
    },
    "agg-sum-last-retracting-deletes": {
        "merge-engine": "aggregation",
        "fields.a.aggregate-function": "sum",
        "fields.b.aggregate-function": "last_non_null_value",
        "fields.b.ignore-retract": "true",
    },
    "agg-first-last": {
        "merge-engine": "aggregation",
        "fields.a.aggregate-function": "first_non_null_value",
        "fields.b.aggregate-function": "last_value",
        "fields.a.ignore-retract": "true",
        "fields.b.ignore-retract": "true",
    },
    "agg-min-first": {
        "merge-engine": "aggregation",
        "fields.a.aggregate-function": "min",
        "fields.b.aggregate-function": "first_value",
        "fields.a.ignore-retract": "true",
        "fields.b.ignore-retract": "true",
        "aggregation.remove-record-on-delete": "true",
    },
}

Row = tuple[int, str, int | None, str | None, str]  # id, dt, a, b, kind

rows_st = st.lists(
    st.tuples(
        st.integers(0, 12),
        st.sampled_from(["x", "y"]),
        st.one_of(st.none(), st.integers(-50, 50)),
        st.one_of(st.none(), st.sampled_from(["p", "q", "r", "s"])),
        st.sampled_from(["+I", "+I", "+U", "-U", "-D"]),
    ),
    min_size=1,
    max_size=12,
)
ops_st = st.lists(
    st.one_of(
        st.tuples(st.just("write"), rows_st),
        st.tuples(st.just("flush"), st.none()),
        st.tuples(st.just("commit"), st.none()),
        st.tuples(st.just("reopen"), st.none()),
    ),
    min_size=1,
    max_size=14,
)


_UNSET = object()  # first_value before the first add row (a retraction can create the key)


def _agg(func: str, old: Any, new: Any) -> Any:
    if func == "first_value":
        return new if old is _UNSET else old
    old = None if old is _UNSET else old
    if func == "sum":
        return new if old is None else (old if new is None else old + new)
    if func == "min":
        return new if old is None else (old if new is None else min(old, new))
    if func == "max":
        return new if old is None else (old if new is None else max(old, new))
    if func == "last_non_null_value":
        return old if new is None else new
    if func == "first_non_null_value":
        return new if old is None else old
    if func == "last_value":
        return new
    raise AssertionError(func)


def _retract(func: str, ignore: bool, old: Any, new: Any) -> Any:
    """Paimon's retract: sum subtracts (a null side leaves / negates), ignore-retract skips."""
    if ignore:
        return old
    assert func == "sum", func  # the configurations above retract nothing else
    old = None if old is _UNSET else old
    return (None if new is None else -new) if old is None else (old if new is None else old - new)


class Oracle:
    def __init__(self, options: dict[str, str]) -> None:
        self.engine = options.get("merge-engine", "deduplicate")
        self.funcs = {
            c: options.get(f"fields.{c}.aggregate-function", "last_non_null_value") for c in "ab"
        }
        self.ignore = {c: options.get(f"fields.{c}.ignore-retract") == "true" for c in "ab"}
        self.remove_on_delete = options.get("aggregation.remove-record-on-delete") == "true"
        self.state: dict[tuple[str, int], dict[str, Any]] = {}

    def apply(self, row: Row) -> None:
        id_, dt, a, b, kind = row
        key = (dt, id_)
        new = {"id": id_, "dt": dt, "a": a, "b": b}
        add = kind in ("+I", "+U")
        if self.engine == "deduplicate":
            if add:
                self.state[key] = new
            else:
                self.state.pop(key, None)
        elif self.engine == "first-row":
            if add and key not in self.state:
                self.state[key] = new
        elif self.engine == "partial-update":
            if kind == "-D":
                self.state.pop(key, None)
            elif kind == "-U":
                pass
            elif key not in self.state:
                self.state[key] = new
            else:
                old = self.state[key]
                for c in "ab":
                    old[c] = _agg("last_non_null_value", old[c], new[c])
        elif kind == "-D" and self.remove_on_delete:
            self.state.pop(key, None)
        else:
            # aggregation: any row makes the key exist, starting from nothing
            old = self.state.setdefault(key, {"id": id_, "dt": dt, "a": _UNSET, "b": _UNSET})
            for c in "ab":
                if add:
                    old[c] = _agg(self.funcs[c], old[c], new[c])
                else:
                    old[c] = _retract(self.funcs[c], self.ignore[c], old[c], new[c])

    def rows(self) -> list[dict[str, Any]]:
        return sorted(
            ({k: (None if v is _UNSET else v) for k, v in r.items()} for r in self.state.values()),
            key=lambda r: (r["dt"], r["id"]),
        )


def _table(rows: list[Row]) -> pa.Table:
    cols = list(zip(*rows, strict=True))
    return pa.table(
        {
            "id": pa.array(cols[0], pa.int64()),
            "dt": pa.array(cols[1]),
            "a": pa.array(cols[2], pa.int64()),
            "b": pa.array(cols[3], pa.string()),
            "_row_kind": pa.array(cols[4]),
        }
    )


def _read(table: Any, snapshot_id: int) -> list[dict[str, Any]]:
    return sorted(table.read(snapshot_id=snapshot_id).to_pylist(), key=lambda r: (r["dt"], r["id"]))


@pytest.mark.parametrize("engine", list(ENGINES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops_st, buckets=st.integers(1, 3))
def test_engine_matches_oracle(engine: str, ops: list[tuple[str, Any]], buckets: int) -> None:
    options = {"bucket": str(buckets), **ENGINES[engine]}
    with tempfile.TemporaryDirectory() as tmp:
        table = Catalog(tmp).create_table(
            "db.t", SCHEMA, primary_key=["id"], partition_by=["dt"], options=options
        )
        oracle = Oracle(options)
        expected: dict[int, list[dict[str, Any]]] = {}
        writer = table.new_write("model")
        for op, arg in [*ops, ("commit", None)]:
            if op == "write":
                writer.write(_table(arg))
                for row in arg:
                    oracle.apply(row)
            elif op == "flush":
                writer.flush()
            if op in ("commit", "reopen"):
                snap = writer.commit()
                # a commit with nothing to commit returns the latest snapshot, which
                # may be an auto-compaction's
                if snap is not None and snap.commit_kind == "APPEND":
                    expected[snap.id] = oracle.rows()
            if op == "reopen":
                writer.close()
                writer = table.new_write("model")
        writer.close()
        for snapshot_id, rows in expected.items():
            assert _read(table, snapshot_id) == rows, f"snapshot {snapshot_id}"
        # every APPEND snapshot is one we expected (none lost or duplicated); an
        # auto-compaction (COMPACT) snapshot reads like the APPEND one before it
        snapshots = table.snapshots()
        assert [s.id for s in snapshots if s.commit_kind == "APPEND"] == sorted(expected)
        for s in snapshots:
            if s.commit_kind == "COMPACT":
                before = max(i for i in expected if i < s.id)
                assert _read(table, s.id) == expected[before], f"compaction {s.id}"


def test_append_table_keeps_every_row(tmp_path: Any) -> None:
    table = Catalog(str(tmp_path)).create_table(
        "db.log", SCHEMA, partition_by=["dt"], options={"bucket": "2"}
    )
    w = table.new_write("u")
    w.write(
        pa.table({"id": [1, 1, 2], "dt": ["x", "x", "y"], "a": [1, 1, 2], "b": ["p", "p", None]})
    )
    w.commit()
    w.write(pa.table({"id": [1], "dt": ["x"], "a": [5], "b": ["q"]}))
    w.commit()
    rows = sorted(table.read().to_pylist(), key=lambda r: (r["id"], r["a"]))
    assert [(r["id"], r["a"]) for r in rows] == [(1, 1), (1, 1), (1, 5), (2, 2)]
    assert table.read(snapshot_id=1).num_rows == 3
