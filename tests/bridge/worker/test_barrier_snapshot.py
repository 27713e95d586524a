"""One meaning of "the snapshot of barrier N": the worker's reports and `dts meta rebuild`
name the same snapshot, also when a compaction carries the same barrier afterwards."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from bridge.meta.filestore_source import snapshot_barriers
from bridge.worker.tiers import snapshot_id_at
from filestore import Catalog
from filestore.format.snapshot import APPEND, COMPACT, CommitKind, barrier_snapshots


def test_worker_report_and_rebuild_agree_across_compactions(warehouse: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    t = Catalog(str(warehouse)).create_table(
        "db.t", schema, primary_key=["id"], options={"bucket": "1", "auto-compaction": "false"}
    )
    w = t.new_write("dts-worker")
    appended = {}
    for barrier in (100, 200):
        w.write(pa.table({"id": [1, 2], "v": [f"a{barrier}", f"b{barrier}"]}, schema=schema))
        appended[barrier] = w.commit(barrier=barrier, identifier=barrier).id
    w.close()
    t.compact(full=True)  # a COMPACT snapshot stamped with barrier 200, same rows
    kinds = [(s.commit_kind, s.barrier) for s in t.snapshots()]
    assert kinds == [(APPEND, 100), (APPEND, 200), (COMPACT, 200)]
    assert isinstance(t.snapshots()[-1].commit_kind, str) and CommitKind("COMPACT") == COMPACT

    rebuilt = snapshot_barriers(t.snapshots())  # what `dts meta rebuild` records
    for barrier, snap_id in appended.items():
        assert snapshot_id_at(t, barrier) == snap_id  # what the worker reports (re-reports)
        assert rebuilt[barrier].snapshot_id == snap_id
        assert t.snapshot_for_barrier(barrier).id == snap_id  # type: ignore[union-attr]
    # reading at a barrier may use the newest snapshot with it: same rows either way
    assert t.snapshot_at_barrier(200).commit_kind == COMPACT  # type: ignore[union-attr]
    assert t.read(barrier=200).sort_by("id") == t.read(snapshot_id=appended[200]).sort_by("id")
    assert snapshot_id_at(t, 150) is None and t.snapshot_for_barrier(150) is None


def test_a_barrier_only_a_compaction_carries_resolves_to_its_first_compaction() -> None:
    from filestore.format.snapshot import Snapshot

    def snap(i: int, kind: str, barrier: int | None) -> Snapshot:
        return Snapshot(i, 0, "b", "d", None, "u", i, kind, i, barrier)

    snaps = [snap(3, COMPACT, 7), snap(4, COMPACT, 7), snap(5, APPEND, 9), snap(6, COMPACT, 9)]
    points = barrier_snapshots(snaps)
    assert {b: s.id for b, s in points.items()} == {7: 3, 9: 5}
