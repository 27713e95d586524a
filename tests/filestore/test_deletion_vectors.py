"""Deletion vectors (``deletion-vectors.enabled``): reads merge nothing, and are right.

Property: on random histories (upserts with several flushes per commit, deletes,
compactions, overwrites, expirations) a table with deletion vectors reads, at
every snapshot, exactly what the same history gives a table without them (merge on
read), every key has one live row, and the stored changelog between any two snapshots
replays from one state to the other. Real files throughout.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from filestore import Catalog, CommitKind, CommitProperties, Table
from filestore.errors import CommitConflict, InvalidOption, SchemaError
from filestore.format.manifest import ADD, DELETE
from filestore.format.options import CoreOptions
from filestore.read.split import SplitReader
from filestore.state.deletion_vectors import deleted_count
from tests.filestore.test_stored_changelog import _rows, replay

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("n", pa.int64())]
)
DV = {"deletion-vectors.enabled": "true"}
State = dict[int, dict[str, Any]]


def _state(t: Table, sid: int) -> State:
    rows = t.read(snapshot_id=sid).to_pylist()
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), f"snapshot {sid}: a key has two live rows"
    return {r["id"]: r for r in rows}


def _both(warehouse: Path, name: str, options: dict[str, str]) -> tuple[Table, Table]:
    catalog = Catalog(str(warehouse))
    with_dv = catalog.create_table(
        f"db.{name}_dv", SCHEMA, primary_key=["id"], options={**options, **DV}
    )
    merged = catalog.create_table(f"db.{name}", SCHEMA, primary_key=["id"], options=options)
    return with_dv, merged


def _apply(t: Table, op: str, step: int, rnd: random.Random) -> None:
    w = t.new_write("w")
    try:
        if op == "upsert":
            ids = rnd.sample(range(80), rnd.randint(1, 30))
            w.write(_rows(ids, f"s{step}-"))
            if rnd.random() < 0.4:  # a second flush in the same commit, same keys
                w.flush()
                w.write(_rows(ids[: len(ids) // 2 + 1], f"t{step}-"))
            w.commit()
        elif op == "delete":
            ids = rnd.sample(range(80), rnd.randint(1, 12))
            w.write(_rows(ids, "", ["-D"] * len(ids)))
            w.commit()
        elif op == "compact":
            t.compact(full=rnd.random() < 0.5)
        elif op == "expire":
            t.expire(retain_min=1, retain_max=4)
        else:
            ids = rnd.sample(range(80), rnd.randint(1, 10))
            w.write(_rows(ids, f"o{step}-"))
            t.new_commit("w").commit(
                w.prepare(), CommitProperties(1000 + step, kind=CommitKind.OVERWRITE)
            )
    finally:
        w.close()


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_histories_read_as_the_merge_does(warehouse: Path, seed: int) -> None:
    with_dv, merged = _both(
        warehouse, f"t{seed}", {"bucket": "2", "num-sorted-run.compaction-trigger": "3"}
    )
    ops = ["upsert", "upsert", "upsert", "delete", "compact", "overwrite", "expire"]
    pick = random.Random(seed)
    plan = [pick.choice(ops) for _ in range(18)]
    after_step: dict[str, list[State]] = {}
    for t in (with_dv, merged):
        rnd = random.Random(seed * 7)
        after_step[t.name] = []
        for step, op in enumerate(plan):
            _apply(t, op, step, rnd)
            latest = t.latest_snapshot()
            after_step[t.name].append(_state(t, latest.id) if latest else {})
    # the table with vectors also compacts files its vectors mostly delete
    # (compaction.delete-ratio-threshold), so its snapshots are compared step by step
    assert after_step[with_dv.name] == after_step[merged.name], seed
    dv_snaps = with_dv.snapshots()
    states = {s.id: _state(with_dv, s.id) for s in dv_snaps}
    vectored = [e for e in with_dv.live_entries(dv_snaps[-1]) if e.file.deletion_vector]
    assert vectored or any(s.commit_kind == "COMPACT" for s in dv_snaps[-2:]), plan
    for i, start in enumerate(dv_snaps):
        for end in dv_snaps[i:]:
            replayed = replay(states[start.id], with_dv.changes(start.id, end.id))
            assert replayed == states[end.id], (seed, start.id, end.id)


def test_an_upsert_marks_the_old_row_and_the_read_merges_nothing(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = Catalog(str(warehouse)).create_table("db.t", SCHEMA, primary_key=["id"], options=DV)
    w = t.new_write("w")
    w.write(_rows(list(range(10)), "a"))
    first = w.commit()
    w.write(_rows([2, 5], "bb"))
    w.write(_rows([7], "", ["-D"]))
    second = w.commit()
    w.close()
    assert first and second
    delta = t.manifest_store.read_entries([second.delta_manifest_list])
    old = [e for e in delta if e.file.file_name == t.live_entries(first)[0].file.file_name]
    # the first file is re-added with the positions of 2, 5 and 7 deleted
    assert [e.kind for e in old] == [DELETE, ADD]
    assert deleted_count(old[1].file) == 3
    assert not old[0].file.deletion_vector

    def no_merge(*args: object, **kwargs: object) -> None:
        raise AssertionError("a read with deletion vectors merged")

    monkeypatch.setattr(SplitReader, "_merge_section", no_merge)
    got = {r["id"]: r["v"] for r in t.read().to_pylist()}
    assert got == {**{i: f"a{i}" for i in range(10) if i != 7}, 2: "bb2", 5: "bb5"}
    changes = sorted(
        (r["_row_kind"], r["id"], r["v"]) for r in t.changes(first.id, second.id).to_pylist()
    )
    assert changes == sorted(
        [("-U", 2, "a2"), ("+U", 2, "bb2"), ("-U", 5, "a5"), ("+U", 5, "bb5"), ("-D", 7, "a7")]
    )


def test_a_key_filter_reads_row_groups_through_the_vector(warehouse: Path) -> None:
    import pyarrow.compute as pc

    t = Catalog(str(warehouse)).create_table("db.t", SCHEMA, primary_key=["id"], options=DV)
    w = t.new_write("w")
    w.write(_rows(list(range(300_000)), "a"))  # three row groups
    w.commit()
    w.write(_rows(list(range(200_000, 200_010)), "b"))
    w.commit()
    w.close()
    got = t.read(filter=(pc.field("id") >= 199_995) & (pc.field("id") < 200_005)).to_pylist()
    assert sorted((r["id"], r["v"]) for r in got) == [
        (i, f"{'a' if i < 200_000 else 'b'}{i}") for i in range(199_995, 200_005)
    ]


def test_a_compaction_that_read_rows_deleted_since_is_refused(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table(
        "db.t", SCHEMA, primary_key=["id"], options={**DV, "auto-compaction": "false"}
    )
    for tag in ("a", "b"):
        w = t.new_write("w")
        w.write(_rows([1, 2, 3], tag))
        w.commit()
        w.close()
    from filestore.commit.messages import CommitMessage
    from filestore.maintenance.compaction import CompactUnit, rewrite

    snap = t.latest_snapshot()
    assert snap is not None
    live = t.live_entries(snap)
    unit = CompactUnit(1, tuple(e.file for e in live), drop_deletes=True)
    new_files = rewrite(t, (), 0, unit)
    w = t.new_write("w")
    w.write(_rows([2], "c"))  # deletes row 2 of a compaction input meanwhile
    w.commit()
    w.close()
    message = CommitMessage((), 0, 1, tuple(new_files), unit.files)
    with pytest.raises(CommitConflict, match="deleted by a concurrent commit"):
        t.new_commit("compactor").commit([message], CommitProperties(1, kind=CommitKind.COMPACT))
    assert {r["id"]: r["v"] for r in t.read().to_pylist()} == {1: "b1", 2: "c2", 3: "b3"}


def test_a_failed_commit_leaves_the_vectors_of_the_previous_snapshot(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from filestore.format.snapshot import SnapshotManager

    t = Catalog(str(warehouse)).create_table("db.t", SCHEMA, primary_key=["id"], options=DV)
    w = t.new_write("w")
    w.write(_rows([1, 2, 3], "a"))
    before = w.commit()
    w.write(_rows([1, 2], "b"))

    def crash(self: SnapshotManager, snapshot: object) -> bool:
        raise OSError("disk gone")

    monkeypatch.setattr(SnapshotManager, "try_commit", crash)
    with pytest.raises(OSError):
        w.commit()
    monkeypatch.undo()
    w.close()
    assert t.latest_snapshot() == before
    assert {r["id"]: r["v"] for r in t.read().to_pylist()} == {1: "a1", 2: "a2", 3: "a3"}
    assert all(not e.file.deletion_vector for e in t.live_entries(before))


@pytest.mark.parametrize(
    "options", [{}, {"merge-engine": "partial-update"}], ids=["no key", "partial-update"]
)
def test_deletion_vectors_need_a_key_and_the_deduplicate_engine(
    warehouse: Path, options: dict[str, str]
) -> None:
    key = [] if not options else ["id"]
    with pytest.raises(SchemaError, match=r"deletion-vectors\.enabled needs a primary key"):
        Catalog(str(warehouse)).create_table(
            "db.t", SCHEMA, primary_key=key, options={**options, **DV}
        )


def test_expiration_keeps_files_whose_vectors_grew(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table(
        "db.t", SCHEMA, primary_key=["id"], options={**DV, "auto-compaction": "false"}
    )
    for step in range(6):
        w = t.new_write("w")
        w.write(_rows(list(range(step, 40, 3)), f"s{step}-"))
        w.commit()
        w.close()
    want = t.read().to_pylist()
    latest = t.latest_snapshot()
    assert latest is not None
    result = t.expire(retain_min=1, retain_max=1)
    assert len(result.expired_snapshots) == 5 and not result.deleted_data_files
    assert any(e.file.deletion_vector for e in t.live_entries(latest))
    t.remove_orphans(older_than_ms=0)
    assert t.read().to_pylist() == want
    for e in t.live_entries(latest):
        assert Path(t.paths.data_file([], (), 0, e.file.file_name)).exists()


def _upsert(t: Table, ids: list[int], tag: str) -> None:
    w = t.new_write("w")
    try:
        w.write(_rows(ids, tag))
        w.commit()
    finally:
        w.close()


def _upper(t: Table) -> list[Any]:
    return [e.file for e in t.live_entries(t.latest_snapshot()) if e.file.level > 0]


@pytest.mark.parametrize(("threshold", "purged"), [(None, True), ("0.5", False)])
def test_an_upper_file_mostly_deleted_is_rewritten_without_its_deleted_rows(
    warehouse: Path, threshold: str | None, purged: bool
) -> None:
    """compaction.delete-ratio-threshold (default 0.2): once upserts have deleted that
    share of an upper-level file through its vector, auto-compaction rewrites that file
    alone, at its level, without those rows; the read never changes."""
    options = {**DV, "bucket": "1"}
    if threshold is not None:
        options["compaction.delete-ratio-threshold"] = threshold
    t = Catalog(str(warehouse)).create_table("db.t", SCHEMA, primary_key=["id"], options=options)
    _upsert(t, list(range(100)), "a")
    t.compact(full=True)
    (base,) = _upper(t)
    _upsert(t, list(range(10)), "b")  # 10%: below every threshold
    assert [deleted_count(f) for f in _upper(t)] == [10]
    _upsert(t, list(range(10, 25)), "c")  # 25%
    expected = {i: ("b" if i < 10 else "c" if i < 25 else "a") + str(i) for i in range(100)}
    assert {r["id"]: r["v"] for r in t.read().to_pylist()} == expected
    (upper,) = _upper(t)
    if purged:
        assert upper.file_name != base.file_name and upper.level == base.level
        assert upper.row_count == 75 and not upper.deletion_vector
        assert t.latest_snapshot().commit_kind == CommitKind.COMPACT
    else:
        assert upper.file_name == base.file_name and deleted_count(upper) == 25
    # the level-0 files of the upserts are the picker's, untouched by the rule
    assert sorted(
        e.file.row_count for e in t.live_entries(t.latest_snapshot()) if e.file.level == 0
    ) == [10, 15]


def test_a_table_with_iceberg_metadata_rewrites_a_file_a_twentieth_deleted(
    warehouse: Path,
) -> None:
    """With Iceberg metadata the threshold defaults to 0.05 (DuckDB checks every row of a
    file with any position delete); set, it is what was set."""
    assert CoreOptions.from_map(DV).compaction_delete_ratio == 0.2
    with_iceberg = {**DV, "bucket": "1", "metadata.iceberg.storage": "table-location"}
    assert CoreOptions.from_map(with_iceberg).compaction_delete_ratio == 0.05
    pinned = {**with_iceberg, "compaction.delete-ratio-threshold": "0.2"}
    assert CoreOptions.from_map(pinned).compaction_delete_ratio == 0.2
    t = Catalog(str(warehouse)).create_table(
        "db.t", SCHEMA, primary_key=["id"], options=with_iceberg
    )
    _upsert(t, list(range(100)), "a")
    t.compact(full=True)
    (base,) = _upper(t)
    _upsert(t, list(range(6)), "b")  # 6%: over a twentieth, under Paimon's fifth
    (upper,) = _upper(t)
    assert upper.file_name != base.file_name and upper.row_count == 94
    assert not upper.deletion_vector
    expected = {i: ("b" if i < 6 else "a") + str(i) for i in range(100)}
    assert {r["id"]: r["v"] for r in t.read().to_pylist()} == expected


def test_a_full_compaction_leaves_no_deletion_vector(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table(
        "db.t", SCHEMA, primary_key=["id"], options={**DV, "bucket": "1"}
    )
    _upsert(t, list(range(100)), "a")
    t.compact(full=True)
    _upsert(t, [1, 2], "b")
    t.compact(full=True)
    (only,) = [e.file for e in t.live_entries(t.latest_snapshot())]
    assert only.row_count == 100 and not only.deletion_vector
    assert t.compact(full=True).snapshot is None  # settled: nothing more to do


@pytest.mark.parametrize("given", ["0", "1.5", "most"])
def test_a_bad_delete_ratio_threshold_is_named(warehouse: Path, given: str) -> None:
    with pytest.raises(InvalidOption, match=r"compaction\.delete-ratio-threshold"):
        Catalog(str(warehouse)).create_table(
            "db.t",
            SCHEMA,
            primary_key=["id"],
            options={**DV, "compaction.delete-ratio-threshold": given},
        )
