"""Streaming reads of the FileStore tier and the streaming sink's barrier propagation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from filestore import CommitProperties
from tests.bridge.spark.support import barriers, commit, into_dts, make_table, rows, sort

pytestmark = pytest.mark.spark


def _run(dts: Any, warehouse: Path, src: str, dst: str, ck: Path, **opts: Any) -> Any:
    """One Trigger.AvailableNow run of src -> dst through dts (restartable from `ck`)."""
    r = dts.readStream.format("dts").option("warehouse", str(warehouse)).option("tier", "file")
    for k, v in opts.items():
        r = r.option(k, str(v))
    return into_dts(r.load(src), warehouse, dst, ck)


def test_file_stream_chain_carries_sourcebarriers(
    dts: Any, warehouse: Path, tmp_path: Path
) -> None:
    t0, t1, t2 = (make_table(warehouse, f"db.{n}") for n in ("t0", "t1", "t2"))
    commit(t0, rows(10), barrier=100)
    commit(t0, rows(5, start=8, k="b"), barrier=200)
    _run(dts, warehouse, "db.t0", "db.t1", tmp_path / "ck1")
    assert sort(t1.read()) == sort(t0.read())
    assert barriers(t1) == [200]  # latest-full: the snapshot at barrier 200 in one batch

    w = t0.new_write("test")  # barrier 300: an update and a delete
    w.write(pa.table({"id": [1, 2], "k": ["z", "z"], "v": [0.0, 0.0], "_row_kind": ["+U", "-D"]}))
    w.commit(barrier=300)
    _run(dts, warehouse, "db.t0", "db.t1", tmp_path / "ck1")  # restart from the checkpoint
    assert sort(t1.read()) == sort(t0.read())
    t0.new_commit("test").commit([], CommitProperties(99, barrier=400))  # an idle barrier: no rows
    _run(dts, warehouse, "db.t0", "db.t1", tmp_path / "ck1")
    assert barriers(t1) == [200, 300, 400]  # the idle barrier propagated too
    for b in (200, 300, 400):
        assert sort(t1.read(barrier=b)) == sort(t0.read(barrier=b))

    _run(dts, warehouse, "db.t1", "db.t2", tmp_path / "ck2")
    assert sort(t2.read()) == sort(t0.read())
    assert barriers(t2) == [400]
    assert set(barriers(t2)) <= set(barriers(t0))


def test_stream_started_before_its_source_has_a_snapshot(
    dts: Any, warehouse: Path, tmp_path: Path
) -> None:
    """A derived stream may start before its source's first commit: that first batch must
    not stamp a barrier of its own (it would be newer than the source's first real one,
    and the derived table would refuse every later batch)."""
    src, dst = (make_table(warehouse, f"db.{n}") for n in ("early_src", "early_dst"))
    _run(dts, warehouse, "db.early_src", "db.early_dst", tmp_path / "ck")
    assert barriers(dst) == []
    commit(src, rows(10), barrier=100)
    _run(dts, warehouse, "db.early_src", "db.early_dst", tmp_path / "ck")
    assert sort(dst.read()) == sort(src.read())
    assert barriers(dst) == [100]


def test_scan_modes_and_admission_control(dts: Any, warehouse: Path, tmp_path: Path) -> None:
    t0 = make_table(warehouse, "db.s0")
    snaps = [commit(t0, rows(4, start=i * 4), barrier=(i + 1) * 10) for i in range(4)]
    a = make_table(warehouse, "db.sa")
    # from-snapshot 2, one barrier per micro-batch: three batches, one per snapshot
    _run(
        dts,
        warehouse,
        "db.s0",
        "db.sa",
        tmp_path / "cka",
        **{
            "scan.mode": "from-snapshot",
            "scan.snapshot-id": snaps[1].id,
            "maxBarriersPerTrigger": 1,
        },
    )
    assert barriers(a) == [20, 30, 40]
    assert sort(a.read()) == sort(rows(12, start=4))
    b = make_table(warehouse, "db.sb")
    # from-barrier 20: changes after barrier 20; maxRowsPerTrigger=5 -> one snapshot (4 rows) per batch
    _run(
        dts,
        warehouse,
        "db.s0",
        "db.sb",
        tmp_path / "ckb",
        **{"scan.mode": "from-barrier", "scan.barrier": 20, "maxRowsPerTrigger": 5},
    )
    assert barriers(b) == [30, 40]
    assert sort(b.read()) == sort(rows(8, start=8))
    c = make_table(warehouse, "db.sc")
    _run(dts, warehouse, "db.s0", "db.sc", tmp_path / "ckc", **{"scan.mode": "latest"})
    assert c.read().num_rows == 0


def test_stream_rows_carry_row_kind_and_barrier(dts: Any, warehouse: Path, tmp_path: Path) -> None:
    t0 = make_table(warehouse, "db.m0")
    commit(t0, rows(3), barrier=7)
    got: list[Any] = []
    q = (
        dts.readStream.format("dts")
        .option("warehouse", str(warehouse))
        .option("tier", "file")
        .load("db.m0")
        .writeStream.foreachBatch(lambda df, _id: got.extend(df.collect()))
        .option("checkpointLocation", str(tmp_path / "ckm"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(120)
    assert sorted((r["id"], r["_row_kind"], r["_barrier"]) for r in got) == [
        (0, "+I", 7),
        (1, "+I", 7),
        (2, "+I", 7),
    ]
    # local_session's checkpoints are written without Hadoop's .crc files beside them
    assert (tmp_path / "ckm" / "offsets" / "0").is_file()
    assert (tmp_path / "ckm" / "commits" / "0").is_file()
    assert not list((tmp_path / "ckm").rglob("*.crc"))


def test_a_batch_of_compaction_snapshots_only_stamps_no_barrier_again(
    dts: Any, warehouse: Path, tmp_path: Path
) -> None:
    """A compaction snapshot keeps its table's barrier; a micro-batch that admits only such
    snapshots adds no source barrier and must not stamp the previous one a second time
    (the derived table refused it, and the stream died)."""
    src, dst = (make_table(warehouse, f"db.{n}") for n in ("comp_src", "comp_dst"))
    commit(src, rows(10), barrier=100)
    commit(src, rows(5, start=3, k="b"), barrier=101)
    _run(dts, warehouse, "db.comp_src", "db.comp_dst", tmp_path / "ck")
    src.compact(full=True)
    assert src.latest_snapshot().commit_kind == "COMPACT"
    _run(dts, warehouse, "db.comp_src", "db.comp_dst", tmp_path / "ck")
    commit(src, rows(2, start=20, k="c"), barrier=200)
    _run(dts, warehouse, "db.comp_src", "db.comp_dst", tmp_path / "ck")
    assert sort(dst.read()) == sort(src.read())
    assert barriers(dst) == [101, 200]


def test_a_consumer_keeps_what_a_stopped_stream_has_still_to_read(
    dts: Any, warehouse: Path, tmp_path: Path
) -> None:
    """A stream with consumer-id records its next snapshot at every batch; while it is
    stopped, an expiration that would keep one snapshot keeps what the stream reads next,
    and the restarted stream reads every change. Without one the same restart fails: the
    snapshots it had to read are gone (what the soak's derived stream died of)."""
    src = make_table(warehouse, "db.held")
    held, lost = (make_table(warehouse, f"db.{n}") for n in ("held_copy", "lost_copy"))
    commit(src, rows(10), barrier=100)
    _run(dts, warehouse, "db.held", "db.held_copy", tmp_path / "ck1", **{"consumer-id": "copy"})
    _run(dts, warehouse, "db.held", "db.lost_copy", tmp_path / "ck2")
    stood = src.latest_snapshot().id
    assert [(c.consumer_id, c.next_snapshot) for c in src.consumers()] == [("copy", stood + 1)]
    for i in range(4):  # updates while both streams are stopped
        commit(src, rows(10, k=f"u{i}"), barrier=200 + i)
    src.expire(retain_min=1, older_than_ms=0)
    assert src.snapshots()[0].id == stood  # held: the state its next change read compares with
    _run(dts, warehouse, "db.held", "db.held_copy", tmp_path / "ck1", **{"consumer-id": "copy"})
    assert sort(held.read()) == sort(src.read())
    assert barriers(held)[-1] == 203
    assert src.consumers()[0].next_snapshot == src.latest_snapshot().id + 1

    assert src.delete_consumer("copy")
    src.expire(retain_min=1, older_than_ms=0)  # nothing holds the history now
    expired = r"(?s)SnapshotsExpired.*Give the stream the option consumer-id"
    with pytest.raises(Exception, match=expired):  # Spark wraps the source's error
        _run(dts, warehouse, "db.held", "db.lost_copy", tmp_path / "ck2")
    assert sort(lost.read()) != sort(src.read())
