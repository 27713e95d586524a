"""Commits: idempotence, concurrency across processes, crashes, conflicts, messages as JSON."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

from filestore import BarrierOrderError, Catalog, CommitConflict, CommitMessage, CommitProperties
from filestore.format.data_file import DataFileMeta

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def _rows(ids: list[int], tag: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}-{i}" for i in ids]})


def test_commit_message_json_round_trip(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table(
        "db.t", SCHEMA, primary_key=["id"], options={"bucket": "2"}
    )
    w = t.new_write("u")
    w.write(_rows(list(range(10)), "a"))
    messages = w.prepare()
    assert messages and all(isinstance(m, CommitMessage) for m in messages)
    shipped = [CommitMessage.from_json(json.loads(json.dumps(m.to_json()))) for m in messages]
    assert shipped == messages
    assert shipped[0].new_files[0].min_key() is not None
    snap = t.new_commit("u").commit(
        shipped, CommitProperties(7, barrier=3, log_offsets={0: 4, 1: 6})
    )
    assert snap is not None and snap.commit_identifier == 7 and snap.barrier == 3
    assert snap.log_offsets == {0: 4, 1: 6}
    assert t.read().num_rows == 10
    assert isinstance(messages[0].new_files[0], DataFileMeta)


def test_commit_is_idempotent_by_user_and_identifier(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table("db.t", SCHEMA, primary_key=["id"])
    w = t.new_write("u")
    w.write(_rows([1, 2], "a"))
    messages = w.prepare()
    c = t.new_commit("u")
    first = c.commit(messages, CommitProperties(1, barrier=100))
    again = c.commit(messages, CommitProperties(1, barrier=100))
    assert first is not None and again is not None and first.id == again.id == 1
    assert len(t.snapshots()) == 1 and c.committed_identifier() == 1
    # another user with the same identifier is a different commit
    w2 = t.new_write("other")
    w2.write(_rows([3], "b"))
    other = t.new_commit("other").commit(w2.prepare(), CommitProperties(1))
    assert other is not None and other.id == 2
    # an older identifier of "u" is already covered by identifier 1's successor
    w.write(_rows([4], "c"))
    assert t.new_commit("u").commit(w.prepare(), CommitProperties(2)).id == 3  # type: ignore[union-attr]
    assert t.new_commit("u").commit([], CommitProperties(1)).id == 1  # type: ignore[union-attr]
    assert sorted(t.read().column("id").to_pylist()) == [1, 2, 3, 4]


def test_empty_commit_records_a_barrier(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table("db.t", SCHEMA, primary_key=["id"])
    w = t.new_write("u")
    assert w.commit() is None  # nothing at all: no snapshot
    w.write(_rows([1], "a"))
    s1 = w.commit(barrier=10, log_offsets={0: 1})
    s2 = w.commit(barrier=11)  # an idle barrier still gets its snapshot
    assert s1 is not None and s2 is not None and s2.id == s1.id + 1
    assert s2.barrier == 11 and s2.log_offsets == {0: 1}
    assert t.snapshot_at_barrier(10).id == s1.id  # type: ignore[union-attr]
    assert t.snapshot_at_barrier(12).id == s2.id  # type: ignore[union-attr]
    assert t.snapshot_at_barrier(9) is None
    with pytest.raises(CommitConflict, match="barrier 5 is not newer"):
        w.commit(barrier=5)


def test_barrier_ids_strictly_increase_per_table(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table("db.t", SCHEMA, primary_key=["id"])
    w = t.new_write("u")
    w.write(_rows([1], "a"))
    assert w.commit(barrier=1) is not None
    w.write(_rows([2], "b"))
    with pytest.raises(BarrierOrderError, match=r"barrier 1 is not newer .* strictly increase"):
        w.commit(barrier=1)
    assert [s.barrier for s in t.snapshots()] == [1]
    # another writer of the table is held to the same order
    other = t.new_write("v")
    other.write(_rows([3], "c"))
    with pytest.raises(BarrierOrderError):
        other.commit(barrier=1)
    other.write(_rows([3], "c"))
    assert other.commit(barrier=2).barrier == 2  # type: ignore[union-attr]
    assert sorted(t.read().column("id").to_pylist()) == [1, 3]


def test_snapshot_at_time_and_time_travel(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table("db.t", SCHEMA, primary_key=["id"])
    w = t.new_write("u")
    w.write(_rows([1], "a"))
    s1 = w.commit()
    time.sleep(0.01)
    w.write(_rows([1], "b"))
    s2 = w.commit()
    assert s1 and s2
    assert t.snapshot_at_time(s1.time_millis).id == s1.id  # type: ignore[union-attr]
    assert t.snapshot_at_time(s1.time_millis - 1) is None
    assert t.read(timestamp=s1.time_millis).column("v").to_pylist() == ["a-1"]
    assert t.read(barrier=None).column("v").to_pylist() == ["b-1"]


def test_loser_of_a_race_rebases_on_other_buckets(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table(
        "db.t", SCHEMA, primary_key=["id"], options={"bucket": "4"}
    )
    a, b = t.new_write("a"), t.new_write("b")
    a.write(_rows([1], "a"))
    b.write(_rows([2, 3], "b"))
    ma, mb = a.prepare(), b.prepare()
    assert t.new_commit("a").commit(ma, CommitProperties(1)).id == 1  # type: ignore[union-attr]
    assert t.new_commit("b").commit(mb, CommitProperties(1)).id == 2  # type: ignore[union-attr]
    assert sorted(t.read().column("id").to_pylist()) == [1, 2, 3]


def test_interleaved_writers_on_one_bucket_commit_in_commit_order(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table("db.t", SCHEMA, primary_key=["id"])
    a, b = t.new_write("a"), t.new_write("b")
    a.write(_rows([1, 5], "a1"))
    b.write(_rows([2, 5, 6], "b1"))
    a.write(_rows([3], "a2"))  # a's sequence range now spans b's
    ma, mb = a.prepare(), b.prepare()
    t.new_commit("b").commit(mb, CommitProperties(1))
    snap = t.new_commit("a").commit(ma, CommitProperties(1))  # rebased past b: no conflict, a wins
    assert snap is not None and snap.id == 2
    assert dict(zip(*t.read().to_pydict().values(), strict=True)) == {
        1: "a1-1",
        2: "b1-2",
        3: "a2-3",
        5: "a1-5",
        6: "b1-6",
    }
    # the rebase replaced a's files: only live files remain on disk
    live = {f.file_name for s in t.new_scan().plan() for f in s.files}
    assert {p.name for p in warehouse.rglob("data-*.parquet")} == live


def test_later_commit_wins_over_earlier_write(warehouse: Path) -> None:
    """Writer a writes key 42 first, b after it; b commits first, then a: a's value wins."""
    t = Catalog(str(warehouse)).create_table("db.t", SCHEMA, primary_key=["id"])
    a, b = t.new_write("a"), t.new_write("b")
    a.write(_rows([42], "a"))
    b.write(_rows([42], "b"))
    s1 = b.commit(identifier=1)
    s2 = a.commit(identifier=1)
    assert s1 is not None and s2 is not None and (s1.id, s2.id) == (1, 2)
    assert t.read(snapshot_id=1).column("v").to_pylist() == ["b-42"]
    assert t.read(snapshot_id=2).column("v").to_pylist() == ["a-42"]
    assert s2.max_sequence_number > s1.max_sequence_number
    # a's next write is numbered past its rebased commit and commits without a rewrite
    a.write(_rows([42], "a2"))
    s3 = a.commit()
    assert s3 is not None and t.read().column("v").to_pylist() == ["a2-42"]
    # compaction keeps the commit order
    t.compact(full=True)
    assert t.read().column("v").to_pylist() == ["a2-42"]


def _commit_worker(warehouse: str, proc: int, commits: int, out: str) -> None:
    t = Catalog(warehouse).get_table("db.t")
    acked = []
    for c in range(commits):
        ids = [c * 100 + proc * 10 + k for k in range(3)]
        for _attempt in range(50):
            w = t.new_write(f"p{proc}")
            w.write(_rows(ids, f"p{proc}"))
            try:
                snap = w.commit(identifier=c + 1)
            except CommitConflict:
                continue
            finally:
                w.close()
            assert snap is not None
            acked.append({"identifier": c + 1, "snapshot": snap.id, "ids": ids})
            break
    Path(out).write_text(json.dumps(acked))


def test_processes_committing_concurrently(warehouse: Path, tmp_path: Path) -> None:
    procs, commits = 4, 6
    Catalog(str(warehouse)).create_table(
        "db.t", SCHEMA, primary_key=["id"], options={"bucket": "2"}
    )
    ctx = mp.get_context("spawn")
    outs = [str(tmp_path / f"p{i}.json") for i in range(procs)]
    workers = [
        ctx.Process(target=_commit_worker, args=(str(warehouse), i, commits, outs[i]))
        for i in range(procs)
    ]
    for p in workers:
        p.start()
    for p in workers:
        p.join(timeout=120)
        assert p.exitcode == 0
    t = Catalog(str(warehouse)).get_table("db.t")
    snaps = t.snapshots()
    assert [s.id for s in snaps] == list(range(1, len(snaps) + 1))  # none lost
    # auto-compaction (on by default) adds COMPACT snapshots between the writers' commits
    appends = [s for s in snaps if s.commit_kind == "APPEND"]
    committed = [(s.commit_user, s.commit_identifier) for s in appends]
    assert len(committed) == len(set(committed))  # none duplicated
    expected_ids = []
    for i, out in enumerate(outs):
        acked = json.loads(Path(out).read_text())
        assert len(acked) == commits
        for a in acked:
            assert committed.count((f"p{i}", a["identifier"])) == 1
            assert t.snapshot(a["snapshot"]).commit_user == f"p{i}"
            expected_ids += a["ids"]
    assert len(appends) == procs * commits
    assert sorted(t.read().column("id").to_pylist()) == sorted(expected_ids)


_CRASH_CHILD = textwrap.dedent(
    """
    import sys, time
    import pyarrow as pa
    from filestore import Catalog
    from filestore.format.snapshot import SnapshotManager
    warehouse, mode = sys.argv[1], sys.argv[2]
    t = Catalog(warehouse).get_table("db.t")
    w = t.new_write("crasher")
    w.write(pa.table({"id": pa.array(range(100, 200), pa.int64()), "v": ["new"] * 100}))
    if mode == "after-files":
        w.prepare()
    else:  # inside the commit: manifests written, snapshot not yet created
        def hang(self, snapshot):
            print("READY", flush=True)
            time.sleep(600)
        SnapshotManager.try_commit = hang
        w.commit()
    print("READY", flush=True)
    time.sleep(600)
    """
)


@pytest.mark.parametrize("mode", ["after-files", "inside-commit"])
def test_sigkill_between_write_and_commit(warehouse: Path, mode: str) -> None:
    t = Catalog(str(warehouse)).create_table("db.t", SCHEMA, primary_key=["id"])
    w = t.new_write("u")
    w.write(_rows([1, 2, 3], "old"))
    before = w.commit()
    assert before is not None
    child = subprocess.Popen(
        [sys.executable, "-c", _CRASH_CHILD, str(warehouse), mode],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.getcwd(),
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "READY"
        data_files = list(warehouse.rglob("data-*.parquet"))
        assert len(data_files) == 2  # the crasher's file exists on disk
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    t = Catalog(str(warehouse)).get_table("db.t")
    assert t.latest_snapshot().id == before.id  # type: ignore[union-attr]
    assert sorted(t.read().column("id").to_pylist()) == [1, 2, 3]
    # and the table keeps working
    w.write(_rows([4], "after"))
    assert w.commit().id == before.id + 1  # type: ignore[union-attr]
    assert sorted(t.read().column("id").to_pylist()) == [1, 2, 3, 4]
