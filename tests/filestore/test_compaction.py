"""Universal compaction: picking, rewriting, auto-compaction, write stall, races with writers."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from filestore import Catalog, CommitConflict, CommitProperties, DataFileMeta, Table
from filestore.maintenance.compaction import UniversalPicker
from filestore.state.levels import SortedRun, run_counts, sorted_runs

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def _rows(ids: list[int], tag: str, kinds: list[str] | None = None) -> pa.Table:
    data: dict[str, Any] = {"id": pa.array(ids, pa.int64()), "v": [f"{tag}-{i}" for i in ids]}
    if kinds is not None:
        data["_row_kind"] = kinds
    return pa.table(data)


def _state(t: Table, snapshot_id: int | None = None) -> list[tuple[int, str]]:
    return sorted((r["id"], r["v"]) for r in t.read(snapshot_id=snapshot_id).to_pylist())


def _table(warehouse: Path, **options: str) -> Table:
    opts = {"bucket": "2", **options}
    return Catalog(str(warehouse)).create_table("db.t", SCHEMA, primary_key=["id"], options=opts)


def _file(name: str, level: int, size: int, seq: int) -> DataFileMeta:
    return DataFileMeta(name, size, 1, seq, seq, 0, level=level)


# -- the picker -------------------------------------------------------------
def test_sorted_runs_order_newest_first() -> None:
    files = [_file("a", 0, 10, 1), _file("b", 0, 10, 5), _file("c", 3, 10, 0), _file("d", 1, 10, 0)]
    runs = sorted_runs(files)
    assert [(r.level, [f.file_name for f in r.files]) for r in runs] == [
        (0, ["b"]),
        (0, ["a"]),
        (1, ["d"]),
        (3, ["c"]),
    ]


def test_picker_rules() -> None:
    picker = UniversalPicker(max_level=5, max_size_amp_percent=200, size_ratio=1, trigger=5)
    few = [SortedRun(0, (_file(f"f{i}", 0, 10, i),)) for i in range(4)]
    assert picker.pick(few) is None  # below the trigger
    # size amplification: newer runs (4 x 10) > 200% of the oldest (10) -> everything
    runs = [*few, SortedRun(5, (_file("old", 5, 10, 0),))]
    unit = picker.pick(runs)
    assert unit is not None and unit.output_level == 5 and unit.drop_deletes
    assert len(unit.files) == 5
    # a big oldest run: size ratio picks the similar newer runs, output below the oldest
    runs = [*few, SortedRun(5, (_file("old", 5, 10_000, 0),))]
    unit = picker.pick(runs)
    assert unit is not None and unit.output_level == 4 and not unit.drop_deletes
    assert {f.file_name for f in unit.files} == {"f0", "f1", "f2", "f3"}
    # growing sizes: size ratio picks nothing, the file-number rule picks enough runs
    levels = [0, 0, 0, 2, 3, 4]
    grow = [SortedRun(lv, (_file(f"g{i}", lv, 10 * 4**i, 10 - i),)) for i, lv in enumerate(levels)]
    grow.append(SortedRun(5, (_file("old", 5, 10**9, 0),)))
    unit = picker.pick(grow)
    assert unit is not None and unit.output_level == 2 and not unit.drop_deletes
    assert [f.file_name for f in unit.files] == ["g0", "g1", "g2", "g3"]
    # full compaction of a settled single run is a no-op
    assert picker.full([SortedRun(5, (_file("old", 5, 10, 0),))]) is None


# -- real tables --------------------------------------------------------------
def test_compaction_keeps_every_snapshot_readable(warehouse: Path) -> None:
    t = _table(warehouse, **{"auto-compaction": "false", "num-sorted-run.stop-trigger": "20"})
    w = t.new_write("w")
    expected: dict[int, list[tuple[int, str]]] = {}
    for i in range(8):
        w.write(_rows(list(range(i, i + 20)), f"c{i}"))
        if i % 3 == 2:
            w.write(_rows([i, i + 1], "gone", ["-D", "-D"]))
        snap = w.commit()
        assert snap is not None
        expected[snap.id] = _state(t)
    runs_before = run_counts(t, t.latest_snapshot())
    assert max(runs_before.values()) == 8
    result = t.compact()
    assert result.snapshot is not None and result.snapshot.commit_kind == "COMPACT"
    assert max(run_counts(t, t.latest_snapshot()).values()) < 5
    assert result.rows_after < result.rows_before  # versions merged away
    t.compact(full=True)
    assert set(run_counts(t, t.latest_snapshot()).values()) == {1}
    # deletes dropped from the last level
    scan = t.new_scan().plan()
    assert all(f.delete_row_count == 0 and f.level == 5 for s in scan for f in s.files)
    assert _state(t) == expected[max(expected)]
    for sid, rows in expected.items():
        assert _state(t, sid) == rows
    assert t.compact(full=True).snapshot is None  # nothing left to do


def test_output_rolled_at_target_file_size(warehouse: Path) -> None:
    t2 = Catalog(str(warehouse)).create_table(
        "db.small",
        SCHEMA,
        primary_key=["id"],
        options={"auto-compaction": "false", "target-file-size": "8 kb"},
    )
    w2 = t2.new_write("w")
    for i in range(4):
        w2.write(_rows(list(range(i * 2000, i * 2000 + 3000)), f"r{i}"))
        w2.commit()
    before = _state(t2)
    assert _state(t2) == before
    t2.compact(full=True)
    (split,) = t2.new_scan().plan()
    assert len(split.files) > 2
    ranges = sorted((f.min_key(), f.max_key()) for f in split.files)
    for (_, hi), (lo, _) in itertools.pairwise(ranges):
        assert hi < lo  # one sorted run: files do not overlap
    assert _state(t2) == before


def test_auto_compaction_bounds_runs(warehouse: Path) -> None:
    t = _table(warehouse)
    w = t.new_write("w")
    for i in range(25):
        w.write(_rows([i % 7, 100 + i], f"c{i}"))
        w.commit()
        assert max(run_counts(t, t.latest_snapshot()).values()) < 5
    kinds = [s.commit_kind for s in t.snapshots()]
    assert "COMPACT" in kinds and kinds.count("APPEND") == 25
    assert len(t.read()) == 7 + 25


def test_write_stall_compacts_inline(warehouse: Path, caplog: pytest.LogCaptureFixture) -> None:
    t = _table(
        warehouse,
        **{
            "bucket": "1",
            "auto-compaction": "false",
            "num-sorted-run.compaction-trigger": "2",
            "num-sorted-run.stop-trigger": "3",
        },
    )
    w = t.new_write("w")
    with caplog.at_level(logging.WARNING, logger="filestore.write.table_write"):
        for i in range(6):
            w.write(_rows([i, 50], f"c{i}"))
            w.flush()  # each flush is one more level-0 run
        w.commit()
        for i in range(4):
            w.write(_rows([i], f"d{i}"))
            w.commit()
    assert w.stall_count > 0 and w.stall_seconds > 0
    assert "num-sorted-run.stop-trigger" in caplog.text
    assert max(run_counts(t, t.latest_snapshot()).values()) <= 3
    assert _state(t) == sorted(
        [(i, f"d{i}-{i}") for i in range(4)] + [(4, "c4-4"), (5, "c5-5"), (50, "c5-50")]
    )


def test_compaction_racing_a_writer_loses_nothing(warehouse: Path) -> None:
    t = _table(warehouse, **{"auto-compaction": "false"})
    w = t.new_write("w")
    for i in range(6):
        w.write(_rows(list(range(10 * i, 10 * i + 15)), f"c{i}"))
        w.commit()
    raced: list[int] = []

    def writer_commits_meanwhile(done: int, total: int) -> None:
        if raced:
            return
        # the writer deletes keys the compaction is rewriting and adds new ones
        w.write(_rows([0, 1, 2, 30], "x", ["-D", "-D", "-D", "+U"]))
        w.write(_rows([999], "new"))
        snap = w.commit()
        assert snap is not None
        raced.append(snap.id)

    expected_before = {r[0]: r[1] for r in _state(t)}
    result = t.compact(full=True, progress=writer_commits_meanwhile)
    assert result.snapshot is not None and raced and result.snapshot.id == raced[0] + 1
    for k in (0, 1, 2):
        expected_before.pop(k)
    expected_before[30] = "x-30"
    expected_before[999] = "new-999"
    assert dict(_state(t)) == expected_before
    assert dict(_state(t, raced[0])) == expected_before


def test_two_compactions_racing_one_conflicts(warehouse: Path) -> None:
    t = _table(warehouse, **{"auto-compaction": "false"})
    w = t.new_write("w")
    for i in range(6):
        w.write(_rows(list(range(i, i + 10)), f"c{i}"))
        w.commit()
    before = _state(t)
    inputs = {f.file_name for s in t.new_scan().plan() for f in s.files}
    other: list[Any] = []

    def second(done: int, total: int) -> None:
        if not other:
            other.append(t.compact(full=True, commit_user="other"))

    with pytest.raises(CommitConflict, match="concurrent"):
        t.compact(full=True, progress=second)
    assert other[0].snapshot is not None
    assert _state(t) == before
    # the loser's output files were cleaned up: only the winner's files are in the buckets
    live = {f.file_name for s in t.new_scan().plan() for f in s.files}
    on_disk = {p.name for p in warehouse.rglob("data-*.parquet")}
    assert on_disk == live | inputs


def test_commit_during_compaction_keeps_commit_order(warehouse: Path) -> None:
    """A write numbered before a -D but committed during the compaction that drops
    the -D: the commit is rebased past it, so its row is the newest and stays."""
    t = _table(warehouse, **{"auto-compaction": "false", "bucket": "1"})
    slow = t.new_write("slow")
    slow.write(_rows([7], "old"))  # sequence numbered now, committed later
    late = slow.prepare()
    fast = t.new_write("fast")
    fast.write(_rows([7, 8], "f"))
    fast.commit()
    fast.write(_rows([7], "f", ["-D"]))
    fast.commit()

    def slow_commits(done: int, total: int) -> None:
        t.new_commit("slow").commit(late, CommitProperties(1))

    result = t.compact(full=True, progress=slow_commits)
    assert result.snapshot is not None
    # the slow commit came last: its +I wins over the -D committed before it
    assert _state(t) == [(7, "old-7"), (8, "f-8")]


def test_append_only_compaction(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table(
        "db.log", SCHEMA, options={"bucket": "1", "auto-compaction": "false"}
    )
    w = t.new_write("w")
    for i in range(6):
        w.write(_rows([i, i], f"a{i}"))
        w.commit()
    before = sorted(t.read().to_pylist(), key=str)
    result = t.compact()
    assert result.files_before == 6 and result.files_after == 1
    assert sorted(t.read().to_pylist(), key=str) == before
