"""Model-based lifecycle tests: random writes, deletes, compactions, expirations, tags and
rollbacks; every retained snapshot and tag must read as the plain-Python oracle says, and
changes() between any two retained snapshots, replayed onto the first, must give the second."""

from __future__ import annotations

import itertools
import tempfile
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from filestore import Catalog, Table

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("a", pa.int64())])
State = dict[tuple[str, int], dict[str, Any]]

rows_st = st.lists(
    st.tuples(
        st.integers(0, 7),
        st.sampled_from(["x", "y"]),
        st.integers(-9, 9),
        st.sampled_from(["+I", "+U", "+I", "-D", "-U"]),
    ),
    min_size=1,
    max_size=10,
)
ops_st = st.lists(
    st.one_of(
        st.tuples(st.just("write"), rows_st),
        st.tuples(st.just("compact"), st.booleans()),
        st.tuples(st.just("expire"), st.integers(1, 4)),
        st.tuples(st.just("tag"), st.integers(0, 100)),
        st.tuples(st.just("rollback"), st.integers(0, 100)),
    ),
    min_size=1,
    max_size=14,
)


def _apply(state: State, rows: list[tuple[int, str, int, str]]) -> None:
    for id_, dt, a, kind in rows:
        if kind in ("+I", "+U"):
            state[(dt, id_)] = {"id": id_, "dt": dt, "a": a}
        else:
            state.pop((dt, id_), None)


def _read(t: Table, **kw: Any) -> State:
    return {(r["dt"], r["id"]): r for r in t.read(**kw).to_pylist()}


def _replay(start: State, changes: pa.Table) -> State:
    state = {k: dict(v) for k, v in start.items()}
    for row in changes.to_pylist():
        kind = row.pop("_row_kind")
        if kind in ("+I", "+U"):
            state[(row["dt"], row["id"])] = row
        else:
            state.pop((row["dt"], row["id"]), None)
    return state


class Model:
    def __init__(self, t: Table) -> None:
        self.t = t
        self.state: State = {}
        self.expected: dict[int, State] = {}
        self.tags: dict[str, tuple[int, State]] = {}
        self.writer = t.new_write("model")

    def record_new_snapshots(self) -> None:
        """Snapshots made since the last record (commit + auto-compaction) hold the state."""
        latest = self.t.latest_snapshot()
        top = max(self.expected, default=0)
        if latest is not None:
            for sid in range(top + 1, latest.id + 1):
                self.expected[sid] = {k: dict(v) for k, v in self.state.items()}

    def forget_expired(self) -> None:
        alive = {s.id for s in self.t.snapshots()}
        self.expected = {k: v for k, v in self.expected.items() if k in alive}

    def step(self, op: str, arg: Any) -> None:
        t = self.t
        if op == "write":
            data = pa.table(
                {
                    "id": pa.array([r[0] for r in arg], pa.int64()),
                    "dt": [r[1] for r in arg],
                    "a": pa.array([r[2] for r in arg], pa.int64()),
                    "_row_kind": [r[3] for r in arg],
                }
            )
            self.writer.write(data)
            self.writer.commit()
            _apply(self.state, arg)
        elif op == "compact":
            t.compact(full=arg)
        elif op == "expire":
            t.expire(retain_min=arg, older_than_ms=0)
        elif op == "tag" and self.expected:
            ids = sorted(self.expected)
            sid = ids[arg % len(ids)]
            name = f"t{len(self.tags)}"
            t.create_tag(name, sid)
            self.tags[name] = (sid, self.expected[sid])
        elif op == "rollback" and (self.expected or self.tags):
            targets = [("s", s) for s in sorted(self.expected)] + [("t", n) for n in self.tags]
            kind, target = targets[arg % len(targets)]
            if kind == "s":
                t.rollback_to(int(target))
                sid, state = int(target), self.expected[int(target)]
            else:
                t.rollback_to(tag=str(target))
                sid, state = self.tags[str(target)]
            self.expected = {k: v for k, v in self.expected.items() if k <= sid}
            self.expected[sid] = state
            self.state = {k: dict(v) for k, v in state.items()}
            self.writer.close()
            self.writer = t.new_write("model")
        self.record_new_snapshots()
        self.forget_expired()

    def check(self) -> None:
        t = self.t
        assert sorted(self.expected) == [s.id for s in t.snapshots()]
        for sid, state in self.expected.items():
            assert _read(t, snapshot_id=sid) == state, sid
        for name, (_, state) in self.tags.items():
            assert _read(t, tag=name) == state, name
        ids = sorted(self.expected)
        if ids:
            pairs = {(ids[0], ids[-1]), (ids[len(ids) // 2], ids[-1])}
            pairs |= set(itertools.pairwise(ids))  # every retained step
            for start, end in pairs:
                got = _replay(self.expected[start], t.changes(start, end))
                assert got == self.expected[end], (start, end)


def _run(producer: str, ops: list[tuple[str, Any]], buckets: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        t = Catalog(tmp).create_table(
            "db.t",
            SCHEMA,
            primary_key=["id"],
            partition_by=["dt"],
            options={
                "bucket": str(buckets),
                "changelog-producer": producer,
                "num-sorted-run.compaction-trigger": "3",
            },
        )
        model = Model(t)
        for op, arg in ops:
            model.step(op, arg)
        model.check()


_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(ops=ops_st, buckets=st.integers(1, 2))
def test_lifecycle_diff_changelog(ops: list[tuple[str, Any]], buckets: int) -> None:
    _run("none", ops, buckets)


@_SETTINGS
@given(ops=ops_st, buckets=st.integers(1, 2))
def test_lifecycle_lookup_changelog(ops: list[tuple[str, Any]], buckets: int) -> None:
    _run("lookup", ops, buckets)


@_SETTINGS
@given(ops=ops_st, buckets=st.integers(1, 2))
def test_lifecycle_input_changelog(ops: list[tuple[str, Any]], buckets: int) -> None:
    _run("input", ops, buckets)
