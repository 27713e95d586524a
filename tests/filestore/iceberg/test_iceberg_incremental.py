"""The Iceberg sync reuses what the handle's previous sync wrote (``filestore.iceberg.state``)
and never trusts it over the files: what it writes is what a sync from the files writes,
and another writer, a rollback or a failed sync sends it back to the files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from filestore import Catalog, Table
from filestore.iceberg.state import forget_state
from filestore.iceberg.sync import IcebergSync
from tests.filestore.iceberg.test_iceberg_metadata import (
    ICEBERG,
    SCHEMA,
    _commit,
    _metadata,
    _named_files,
)


def _table(warehouse: Path) -> Table:
    return Catalog(str(warehouse)).create_table(
        "db.t", SCHEMA, primary_key=["id"], options={**ICEBERG, "bucket": "2"}
    )


def _version_bytes(t: Table) -> bytes:
    sync = IcebergSync(t)
    version = sync.current_version()
    assert version is not None
    return Path(sync.metadata_path(version)).read_bytes()


def _whole(t: Table) -> list[int]:
    """The snapshot ids the current metadata names, after checking that every file it
    names (manifest lists, manifests, data and delete files) exists."""
    meta = _metadata(t)
    missing = [p for p in _named_files(t, meta) if not Path(p).exists()]
    assert not missing, missing
    return [s["snapshot-id"] for s in meta["snapshots"]]


def test_each_commit_writes_what_a_sync_from_the_files_writes(warehouse: Path) -> None:
    t = _table(warehouse)
    for i in range(8):
        _commit(t, list(range(i, i + 6)), f"s{i}-")
        if i == 4:
            t.create_tag("t4")
        if i == 5:
            t.expire(retain_min=3, retain_max=3)
        incremental = _version_bytes(t)
        forget_state(t)  # the next sync starts from the files: same snapshots, same bytes
        IcebergSync(t).sync()
        assert _version_bytes(t) == incremental
    tagged = [snap.id for _, snap in t.list_tags()]
    assert _whole(t) == sorted({*tagged, *(s.id for s in t.snapshots())})
    assert len(_whole(t)) < 8  # the expiration dropped some


def test_a_version_another_writer_wrote_under_the_same_number_is_read_again(
    warehouse: Path,
) -> None:
    t = _table(warehouse)
    for i in range(3):
        _commit(t, [i, i + 10], f"s{i}-")
    # another writer, as if it had expired snapshot 2's Iceberg files, wrote the same
    # version number the handle last wrote: the hint is the same, the file is not
    sync = IcebergSync(t)
    version = sync.current_version()
    assert version is not None
    meta = json.loads(Path(sync.metadata_path(version)).read_text())
    meta["snapshots"] = [s for s in meta["snapshots"] if s["snapshot-id"] != 2]
    Path(sync.metadata_path(version)).write_text(json.dumps(meta))
    for name in ("snap-2-dts.avro", "2-dts-m0.avro", "2-dts-m1.avro"):
        Path(t.paths.root, "metadata", name).unlink(missing_ok=True)
    _commit(t, [20], "s3-")
    assert _whole(t) == [1, 2, 3, 4]  # snapshot 2 written again, not taken from memory


def test_another_handle_syncing_between_commits_is_followed(warehouse: Path) -> None:
    t = _table(warehouse)
    other = Catalog(str(warehouse)).get_table("db.t")
    for i in range(6):
        _commit(t if i % 2 else other, [i, i + 1], f"s{i}-")
        if i == 3:
            other.create_tag("mid")
            other.expire(retain_min=2, retain_max=2)
    mid = dict(t.list_tags())["mid"].id
    retained = [s.id for s in t.snapshots()]
    assert retained[0] > 1  # the other handle expired some
    assert _whole(t) == sorted({mid, *retained})
    assert _metadata(t)["refs"]["mid"] == {"snapshot-id": mid, "type": "tag"}


def test_ids_a_rollback_freed_and_commits_reused_get_their_own_entries(warehouse: Path) -> None:
    t = _table(warehouse)
    for i in range(5):
        _commit(t, [100 + i], f"s{i}-")
    before = {s["snapshot-id"]: s["timestamp-ms"] for s in _metadata(t)["snapshots"]}
    t.rollback_to(3)  # deletes snapshots 4, 5 and their data files; writes no metadata
    for i in range(3):
        _commit(t, [200 + i], f"r{i}-")
    assert _whole(t) == [1, 2, 3, 4, 5, 6]
    after = {s["snapshot-id"]: s["timestamp-ms"] for s in _metadata(t)["snapshots"]}
    assert {k: after[k] for k in (1, 2, 3)} == {k: before[k] for k in (1, 2, 3)}
    assert [after[k] for k in (4, 5)] == [t.snapshot(k).time_millis for k in (4, 5)]


def test_a_sync_that_failed_half_way_leaves_nothing_trusted(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _table(warehouse)
    _commit(t, [1, 2])
    real = t.io.write_bytes

    def no_hint(path: str, data: bytes) -> None:
        if path.endswith("version-hint.text"):
            raise OSError(28, "No space left on device")
        real(path, data)

    with monkeypatch.context() as m:
        m.setattr(t.io, "write_bytes", no_hint)
        _commit(t, [3])  # its manifests and metadata file are written, the hint is not
    assert _metadata(t)["current-snapshot-id"] == 1
    _commit(t, [4])
    assert _whole(t) == [1, 2, 3]
    assert t.read().num_rows == 4


def test_a_snapshot_that_shows_what_its_parent_shows_names_the_parents_list(
    warehouse: Path,
) -> None:
    """A primary-key table without vectors hides a bucket that needs a merge, so a commit
    into hidden buckets shows readers nothing new: it names its parent's manifest list
    (no file written), and that list outlives the parent while a snapshot names it."""
    t = Catalog(str(warehouse)).create_table(
        "db.t", SCHEMA, primary_key=["id"],
        options={"metadata.iceberg.storage": "table-location", "auto-compaction": "false"},
    )  # fmt: skip
    for i, ids in enumerate([[1, 2], [2, 3], [3, 4]]):  # 1: one run; 2, 3: a merge needed
        _commit(t, ids, f"s{i}-")
    lists = {s["snapshot-id"]: Path(s["manifest-list"]).name for s in _metadata(t)["snapshots"]}
    assert lists == {1: "snap-1-dts.avro", 2: "snap-2-dts.avro", 3: "snap-2-dts.avro"}
    assert not Path(t.paths.root, "metadata", "snap-3-dts.avro").exists()
    t.expire(retain_min=1, retain_max=1)  # 1 and 2 go; 3 keeps 2's list
    assert _whole(t) == [3]
    assert not Path(t.paths.root, "metadata", "snap-1-dts.avro").exists()
    t.compact(full=True)  # one sorted run again: the reader sees rows, in a list of its own
    assert _whole(t) == [3, 4]
    assert Path(_metadata(t)["snapshots"][-1]["manifest-list"]).name == "snap-4-dts.avro"
    forget_state(t)  # a sync from the files writes the same
    incremental = _version_bytes(t)
    IcebergSync(t).sync()
    assert _version_bytes(t) == incremental
