"""Table.changes(): -D/+I/-U/+U between snapshots, per changelog-producer, across compactions."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from filestore import Catalog, CommitKind, CommitProperties, Table

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("v", pa.string())])
Key = tuple[str, int]


def replay(start: dict[Key, dict[str, Any]], changes: pa.Table) -> dict[Key, dict[str, Any]]:
    """Apply a changelog in order: +I/+U set the row, -U/-D remove it."""
    state = {k: dict(v) for k, v in start.items()}
    for row in changes.to_pylist():
        kind = row.pop("_row_kind")
        key = (row["dt"], row["id"])
        if kind in ("+I", "+U"):
            state[key] = row
        else:
            state.pop(key, None)
    return state


def state_of(t: Table, sid: int) -> dict[Key, dict[str, Any]]:
    return {(r["dt"], r["id"]): r for r in t.read(snapshot_id=sid).to_pylist()}


def _write(t: Table, ids: list[int], v: str, kinds: list[str] | None = None) -> int:
    w = t.new_write("w")
    data: dict[str, Any] = {
        "id": pa.array(ids, pa.int64()),
        "dt": ["a" if i % 2 else "b" for i in ids],
    }
    data["v"] = [f"{v}{i}" for i in ids]
    if kinds:
        data["_row_kind"] = kinds
    w.write(pa.table(data))
    snap = w.commit()
    assert snap is not None
    return snap.id


@pytest.mark.parametrize("producer", ["auto", "none", "input", "lookup"])
def test_changes_replay_to_end_state_across_compaction(warehouse: Path, producer: str) -> None:
    t = Catalog(str(warehouse)).create_table(
        "db.t",
        SCHEMA,
        primary_key=["id"],
        partition_by=["dt"],
        options={
            "bucket": "2",
            "changelog-producer": producer,
            "num-sorted-run.compaction-trigger": "3",
        },
    )
    ids = [_write(t, list(range(10)), "a")]
    ids.append(_write(t, [1, 2, 3, 11], "b"))
    ids.append(_write(t, [2, 4], "", ["-D", "-D"]))
    ids.append(_write(t, [3, 5, 12], "c"))
    t.compact(full=True)
    ids.append(_write(t, [5, 6], "d", ["-D", "+U"]))
    ids.append(t.latest_snapshot().id)  # type: ignore[union-attr]
    assert any(s.commit_kind == "COMPACT" for s in t.snapshots())
    for i, start in enumerate(ids):
        for end in ids[i:]:
            got = replay(state_of(t, start), t.changes(start, end))
            assert got == state_of(t, end), (producer, start, end)


def test_lookup_and_diff_give_update_pairs(warehouse: Path) -> None:
    for producer in ("none", "lookup"):
        t = Catalog(str(warehouse)).create_table(
            f"db.{producer}", SCHEMA, primary_key=["id"], options={"changelog-producer": producer}
        )
        s1 = _write(t, [1, 2, 3], "a")
        s2 = _write(t, [1, 4], "b")
        s3 = _write(t, [2], "", ["-D"])
        rows = [(r["_row_kind"], r["id"], r["v"]) for r in t.changes(s1, s3).to_pylist()]
        assert sorted(rows) == sorted(
            [("-U", 1, "a1"), ("+U", 1, "b1"), ("+I", 4, "b4"), ("-D", 2, "a2")]
        ), producer
        # an update pair is adjacent, -U first
        i = rows.index(("-U", 1, "a1"))
        assert rows[i + 1] == ("+U", 1, "b1")
        assert t.changes(s2, s2).num_rows == 0
    # lookup: each commit's level-0 files are compacted right after it, and that
    # COMPACT snapshot carries the changelog
    lookup = Catalog(str(warehouse)).get_table("db.lookup")
    kinds = [(s.commit_kind, s.changelog_record_count) for s in lookup.snapshots()]
    pairs = [("APPEND", 0), ("COMPACT", 3), ("APPEND", 0), ("COMPACT", 3)]
    assert kinds == [*pairs, ("APPEND", 0), ("COMPACT", 1)]


def _stored_or_diff(caplog: pytest.LogCaptureFixture, t: Table, start: int, end: int) -> str:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="filestore.read.changes"):
        t.changes(start, end)
    return "diff" if "computing the diff" in caplog.text else "stored"


def test_lookup_changelog_is_made_by_compaction(
    warehouse: Path, caplog: pytest.LogCaptureFixture
) -> None:
    t = Catalog(str(warehouse)).create_table(
        "db.t",
        SCHEMA,
        primary_key=["id"],
        options={"changelog-producer": "lookup", "auto-compaction": "false", "bucket": "2"},
    )
    _write(t, [9], "z")
    c0 = t.compact().snapshot
    assert c0 is not None
    s1 = _write(t, [1, 2, 3], "a")
    _write(t, [1, 4], "b")
    s3 = _write(t, [2], "", ["-D"])
    assert all(s.changelog_manifest_list is None for s in t.snapshots() if s.id > c0.id)
    # level-0 rows not compacted yet: no stored changelog covers them, the diff answers
    assert _stored_or_diff(caplog, t, s1, s3) == "diff"
    assert replay(state_of(t, s1), t.changes(s1, s3)) == state_of(t, s3)
    # one compaction of three commits' level-0 files stores their net change
    compacted = t.compact().snapshot
    assert compacted is not None and compacted.commit_kind == "COMPACT"
    rows = sorted(
        (r["_row_kind"], r["id"], r["v"]) for r in t.changes(s3, compacted.id).to_pylist()
    )
    assert rows == []  # compaction changes no row
    full = sorted(
        (r["_row_kind"], r["id"], r["v"]) for r in t.changes(c0.id, compacted.id).to_pylist()
    )
    assert full == [("+I", 1, "b1"), ("+I", 3, "a3"), ("+I", 4, "b4")]
    assert _stored_or_diff(caplog, t, c0.id, compacted.id) == "stored"
    assert compacted.changelog_record_count == 3
    # with auto-compaction each commit is followed by its lookup compaction
    t2 = Catalog(str(warehouse)).create_table(
        "db.t2", SCHEMA, primary_key=["id"], options={"changelog-producer": "lookup"}
    )
    a1 = _write(t2, [1, 2], "a")
    a2 = _write(t2, [1], "b")
    # an end holding level-0 files moves on to its compaction; so does a start
    assert _stored_or_diff(caplog, t2, a1, a2) == "stored"
    rows = [(r["_row_kind"], r["id"], r["v"]) for r in t2.changes(a1, a2).to_pylist()]
    assert rows == [("-U", 1, "a1"), ("+U", 1, "b1")]


def test_input_changelog_keeps_what_was_written(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table(
        "db.t", SCHEMA, primary_key=["id"], options={"changelog-producer": "input"}
    )
    s1 = _write(t, [1], "a")
    s2 = _write(t, [1, 1], "b", ["-U", "+U"])
    got = [(r["_row_kind"], r["v"]) for r in t.changes(s1, s2).to_pylist()]
    assert got == [("-U", "b1"), ("+U", "b1")]
    assert list((Path(t.paths.root)).rglob("changelog-*.parquet"))


def test_append_only_changes(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table(
        "db.log", SCHEMA, options={"num-sorted-run.compaction-trigger": "2"}
    )
    s1 = _write(t, [1, 1, 2], "a")
    _write(t, [3, 1], "a")
    t.compact(full=True)
    s3 = t.latest_snapshot().id  # type: ignore[union-attr]
    got = sorted((r["_row_kind"], r["id"]) for r in t.changes(s1, s3).to_pylist())
    assert got == [("+I", 1), ("+I", 3)]


def test_overwrite_with_input_changelog_reports_the_replaced_rows(warehouse: Path) -> None:
    """An OVERWRITE's stored input changelog lacks the rows it replaced: changes() diffs."""
    cat = Catalog(str(warehouse))
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    t = cat.create_table(
        "db.ow", schema, primary_key=["id"], options={"changelog-producer": "input"}
    )
    w = t.new_write("ow")
    w.write(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=schema))
    first = w.commit(identifier=1)
    w.write(pa.table({"id": [3], "v": ["c"]}, schema=schema))
    messages = w.prepare()
    w.close()
    second = t.new_commit("ow").commit(messages, CommitProperties(2, kind=CommitKind.OVERWRITE))
    assert first is not None and second is not None
    assert t.read().to_pylist() == [{"id": 3, "v": "c"}]
    got = sorted((r["id"], r["_row_kind"]) for r in t.changes(first.id, second.id).to_pylist())
    assert got == [(1, "-D"), (2, "-D"), (3, "+I")]
    # the input changelog the writer stored for the overwrite was deleted, not kept
    assert second.changelog_manifest_list is None
    stored = {f.file_name for m in messages for f in m.changelog_files}
    assert stored and not any(p.name in stored for p in warehouse.rglob("changelog-*.parquet"))
