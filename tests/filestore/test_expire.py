"""Snapshot expiration, tags, rollback and orphan-file cleanup on real table directories."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from filestore import Catalog, SnapshotNotFound, Table
from filestore.errors import TagError
from filestore.state.refs import snapshot_refs

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def _state(t: Table, **kw: object) -> list[tuple[int, str]]:
    return sorted((r["id"], r["v"]) for r in t.read(**kw).to_pylist())  # type: ignore[arg-type]


def _files(root: Path, pattern: str) -> set[str]:
    return {p.name for p in root.rglob(pattern)}


def _build(warehouse: Path, commits: int, **options: str) -> tuple[Table, dict[int, list]]:
    opts = {"bucket": "2", "num-sorted-run.compaction-trigger": "3", **options}
    t = Catalog(str(warehouse)).create_table("db.t", SCHEMA, primary_key=["id"], options=opts)
    w = t.new_write("w")
    for i in range(commits):
        ids = list(range(i, i + 6))
        w.write(pa.table({"id": pa.array(ids, pa.int64()), "v": [f"c{i}"] * 6}))
        if i % 4 == 3:
            w.write(pa.table({"id": [i - 2], "v": ["x"], "_row_kind": ["-D"]}))
        w.commit()
    states = {s.id: _state(t, snapshot_id=s.id) for s in t.snapshots()}
    return t, states


def _all_referenced_exist(t: Table, root: Path) -> None:
    """Every file a retained snapshot or tag reads (live data, changelog, manifests) exists."""
    on_disk = _files(root, "data-*") | _files(root, "changelog-*") | _files(root, "manifest-*")
    snaps = [*t.snapshots(), *(s for _, s in t.list_tags())]
    for snap in snaps:
        refs = snapshot_refs(t, snap)
        assert refs.data <= on_disk and refs.manifests <= on_disk


def test_expire_keeps_retained_snapshots_whole(warehouse: Path) -> None:
    t, states = _build(warehouse, 14)
    root = Path(t.paths.root)
    assert any(s.commit_kind == "COMPACT" for s in t.snapshots())
    data_before = _files(root, "data-*")
    result = t.expire(retain_min=4, older_than_ms=0)
    latest = max(states)
    assert [s.id for s in t.snapshots()] == list(range(latest - 3, latest + 1))
    assert result.expired_snapshots == list(range(1, latest - 3))
    assert result.deleted_data_files > 0 and len(_files(root, "data-*")) < len(data_before)
    for s in t.snapshots():
        assert _state(t, snapshot_id=s.id) == states[s.id]
    _all_referenced_exist(t, root)
    with pytest.raises(SnapshotNotFound):
        t.read(snapshot_id=1)
    # every data file left on disk is live in some retained snapshot
    live = {f.file_name for s in t.snapshots() for sp in t.new_scan(s.id).plan() for f in sp.files}
    assert _files(root, "data-*") == live


def test_time_retained_and_max(warehouse: Path) -> None:
    t, _ = _build(warehouse, 6)
    assert t.expire(retain_min=1).expired_snapshots == []  # all younger than 1 h
    assert t.expire(retain_min=1, retain_max=3).expired_snapshots != []
    assert len(t.snapshots()) == 3


def test_expiration_after_commits_by_options(warehouse: Path) -> None:
    t, _ = _build(
        warehouse, 20, **{"snapshot.num-retained.max": "5", "snapshot.num-retained.min": "2"}
    )
    snaps = t.snapshots()
    assert len(snaps) == 5 and snaps[-1].id > 20
    _all_referenced_exist(t, Path(t.paths.root))


def test_tags_survive_expiration_and_delete_cleans_up(warehouse: Path) -> None:
    t, states = _build(warehouse, 6, **{"auto-compaction": "false"})
    t.create_tag("first", 2)
    t.create_tag("v-1.0")
    with pytest.raises(TagError, match="already"):
        t.create_tag("first")
    with pytest.raises(TagError, match="not valid"):
        t.create_tag("bad/name")
    assert [n for n, _ in t.list_tags()] == ["first", "v-1.0"]
    w = t.new_write("w")
    w.write(pa.table({"id": pa.array(range(30), pa.int64()), "v": ["later"] * 30}))
    w.commit()
    t.compact(full=True)
    t.expire(retain_min=1, older_than_ms=0)
    assert len(t.snapshots()) == 1
    root = Path(t.paths.root)
    assert _state(t, tag="first") == states[2]
    assert _state(t, tag="v-1.0") == states[max(states)]
    _all_referenced_exist(t, root)
    before = len(_files(root, "data-*"))
    t.delete_tag("first")
    assert len(_files(root, "data-*")) < before
    assert _state(t, tag="v-1.0") == states[max(states)]
    _all_referenced_exist(t, root)
    with pytest.raises(SnapshotNotFound):
        t.read(tag="first")


def test_rollback_to_snapshot_and_tag(warehouse: Path) -> None:
    t, states = _build(warehouse, 8)
    root = Path(t.paths.root)
    target = 3
    t.create_tag("keep", target)
    r = t.rollback_to(5)
    assert t.latest_snapshot().id == 5 and r.removed_snapshots  # type: ignore[union-attr]
    assert _state(t) == states[5]
    _all_referenced_exist(t, root)
    # writing continues from the rolled-back state
    w = t.new_write("w2")
    w.write(pa.table({"id": [1000], "v": ["after"]}))
    snap = w.commit()
    assert snap is not None and snap.id == 6
    assert _state(t) == sorted([*states[5], (1000, "after")])
    # a tag whose snapshot expired: it becomes the only snapshot
    t.expire(retain_min=1, older_than_ms=0)
    t.rollback_to(tag="keep")
    assert [s.id for s in t.snapshots()] == [target]
    assert _state(t) == states[target]
    live = {f.file_name for sp in t.new_scan().plan() for f in sp.files}
    assert _files(root, "data-*") == live


def test_remove_orphans_respects_the_safety_window(warehouse: Path) -> None:
    t, states = _build(warehouse, 5)
    root = Path(t.paths.root)
    bucket_dir = next(root.glob("bucket-*"))
    stray = [bucket_dir / "data-crashed-0.parquet", root / "manifest" / "manifest-crashed"]
    for p in stray:
        p.write_bytes(b"left by a crashed writer")
    assert t.remove_orphans().deleted == []  # younger than a day: kept
    old = time.time() - 3 * 86_400
    for p in stray:
        os.utime(p, (old, old))
    fresh = bucket_dir / "data-in-flight-0.parquet"
    fresh.write_bytes(b"a commit in flight")
    dry = t.remove_orphans(dry_run=True)
    assert sorted(Path(p).name for p in dry.deleted) == sorted(p.name for p in stray)
    assert all(p.exists() for p in stray)
    result = t.remove_orphans()
    assert not any(p.exists() for p in stray) and fresh.exists() and result.kept_recent >= 1
    for sid, rows in states.items():
        assert _state(t, snapshot_id=sid) == rows


def test_orphan_cleanup_beside_a_writer_that_expires_snapshots(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot expired while remove_orphans walks the references (a worker expires
    after its commits) is passed over, not a FileNotFoundError (the soak met it); a
    snapshot still there whose manifest list is gone is damage, and says so."""
    from filestore.state.refs import referenced_files

    t, _ = _build(warehouse, 6)
    first = t.snapshots()[0]
    read_list = t.manifest_store.read_list

    def expiring_meanwhile(name: str):  # type: ignore[no-untyped-def]
        if name == first.base_manifest_list and not Path(t.paths.snapshot(first.id)).exists():
            raise FileNotFoundError(name)
        return read_list(name)

    walk = list(t.snapshot_manager.iter_backwards())
    monkeypatch.setattr(t.snapshot_manager, "iter_backwards", lambda: iter(walk))
    monkeypatch.setattr(t.manifest_store, "read_list", expiring_meanwhile)
    t.expire(retain_min=2, retain_max=2)  # the walk above still names the first snapshot
    refs = referenced_files(t)
    assert refs.data  # the retained snapshots' files are still referenced
    monkeypatch.setattr(t.snapshot_manager, "exists", lambda sid: True)
    Path(t.paths.earliest_hint).unlink()  # no expiration under way: the missing list is damage
    with pytest.raises(FileNotFoundError):
        referenced_files(t)


def test_orphan_cleanup_in_the_middle_of_an_expiration(warehouse: Path) -> None:
    """Expiration writes EARLIEST before it deletes anything: a walk that meets a snapshot
    below it whose manifest list is already gone (its snapshot file not yet) passes it
    over. The soak's hour met this window once in 11 cleanups."""
    from filestore.state.refs import referenced_files

    t, _ = _build(warehouse, 6)
    first = t.snapshots()[0]
    order: list[str] = []
    delete_file, write_bytes = t.io.delete_file, t.io.write_bytes

    def recorded_delete(path: str) -> None:
        order.append("delete")
        delete_file(path)

    def recorded_write(path: str, data: bytes) -> None:
        if path == t.paths.earliest_hint:
            order.append("earliest")
        write_bytes(path, data)

    t.io.delete_file, t.io.write_bytes = recorded_delete, recorded_write  # type: ignore[method-assign]
    t.expire(retain_min=5, retain_max=5)
    assert order[0] == "earliest" and "delete" in order
    t.io.delete_file, t.io.write_bytes = delete_file, write_bytes  # type: ignore[method-assign]
    # the window: EARLIEST past `first`, its manifest list gone, its snapshot file still there
    t2, _ = _build(warehouse / "again", 6)
    first = t2.snapshots()[0]
    Path(t2.paths.earliest_hint).write_text(str(first.id + 1))
    Path(t2.paths.manifest(first.delta_manifest_list)).unlink()

    def fresh() -> Table:  # a handle that has not read the lists yet (they are cached)
        return Catalog(str(warehouse / "again")).get_table("db.t")

    assert referenced_files(fresh()).data
    Path(t2.paths.earliest_hint).write_text(str(first.id))  # not expiring: damage, said so
    with pytest.raises(FileNotFoundError):
        referenced_files(fresh())
