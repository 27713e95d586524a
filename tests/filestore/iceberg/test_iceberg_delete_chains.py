"""A data file's Iceberg position deletes are a chain (``filestore.iceberg.deletes``): each
commit writes what its vector gained, the snapshots name the whole chain, and the files
go when no retained snapshot names them. pyiceberg and DuckDB read what dts reads at
every snapshot throughout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pyarrow.parquet as pq

from filestore import Catalog, Snapshot, Table
from filestore.iceberg.deletes import MAX_CHAIN
from filestore.state.deletion_vectors import deleted_positions
from tests.filestore.iceberg.test_iceberg_metadata import _metadata, _named_files
from tests.filestore.iceberg.test_iceberg_readers import SCHEMA, _check
from tests.filestore.iceberg.test_iceberg_readers import pytestmark as needs_readers
from tests.filestore.test_stored_changelog import _rows

pytestmark = needs_readers

OPTIONS = {
    "metadata.iceberg.storage": "table-location",
    "deletion-vectors.enabled": "true",
    "auto-compaction": "false",  # the first file lives until the test compacts
}


def _table(warehouse: Path) -> Table:
    return Catalog(str(warehouse)).create_table("db.t", SCHEMA, ["id"], options=OPTIONS)


def _upsert(t: Table, ids: list[int], tag: str) -> None:
    w = t.new_write("w")
    w.write(_rows(ids, tag))
    w.commit()
    w.close()


def _deletes_of(t: Table, snapshot_id: int) -> dict[str, list[str]]:
    """Data file path -> the delete files the snapshot's Iceberg manifests name for it."""
    out: dict[str, list[str]] = {}
    with open(f"{t.paths.root}/metadata/snap-{snapshot_id}-dts.avro", "rb") as f:
        manifests: list[Any] = list(fastavro.reader(f))
    for m in (m for m in manifests if m["content"] == 1):
        with open(m["manifest_path"], "rb") as f:
            for e in fastavro.reader(f):
                d: Any = e["data_file"]  # type: ignore[index,call-overload]
                out.setdefault(d["referenced_data_file"], []).append(d["file_path"])
    return out


def _first_file(t: Table) -> tuple[str, Any]:
    """The path and meta of the data file the first commit wrote, as now."""
    snap = t.latest_snapshot()
    oldest = min(t.live_entries(snap), key=lambda e: e.file.min_sequence_number)
    return t.data_path(oldest.partition, oldest.bucket, oldest.file.file_name), oldest.file


def _positions(files: list[str]) -> list[np.ndarray]:
    return [pq.read_table(p, columns=["pos"]).column("pos").to_numpy() for p in files]


def test_a_files_deletes_from_several_commits_are_a_chain_dropped_after_compaction(
    warehouse: Path,
) -> None:
    t = _table(warehouse)
    _upsert(t, list(range(60)), "a")
    for step in range(3):  # each commit supersedes 5 more rows of the first file
        _upsert(t, list(range(5 * step, 5 * step + 5)), f"u{step}-")
    path, meta = _first_file(t)
    chain = _deletes_of(t, t.latest_snapshot().id)[path]  # type: ignore[union-attr]
    assert len(chain) == 3  # written whole once, then what each commit added
    parts = _positions(chain)
    assert [len(p) for p in parts] == [5, 5, 5]
    union = np.concatenate(parts)
    assert len(np.unique(union)) == len(union)  # never a position twice
    assert sorted(union) == sorted(deleted_positions(meta))
    _check(t)  # every snapshot: each names its own part of the chain

    t.compact(full=True)  # the first file goes, with it the chain from the newest snapshot
    latest = t.latest_snapshot()
    assert latest is not None and path not in _deletes_of(t, latest.id)
    assert all(Path(p).exists() for p in chain)  # older snapshots still name them
    _check(t)

    t.expire(retain_min=1, retain_max=1)  # no retained snapshot names the chain now
    assert not any(Path(p).exists() for p in chain)
    t.remove_orphans(older_than_ms=0)
    assert all(Path(p).exists() for p in _named_files(t, _metadata(t)))
    _check(t)


def test_a_chain_holds_at_most_max_chain_files_then_starts_whole(warehouse: Path) -> None:
    t = _table(warehouse)
    _upsert(t, list(range(60)), "a")
    lengths = []
    for step in range(MAX_CHAIN + 2):
        _upsert(t, [2 * step, 2 * step + 1], f"u{step}-")
        path, _ = _first_file(t)
        lengths.append(len(_deletes_of(t, t.latest_snapshot().id)[path]))  # type: ignore[union-attr]
    assert lengths == [*range(1, MAX_CHAIN + 1), 1, 2]
    named = _deletes_of(t, t.latest_snapshot().id)[path]  # type: ignore[union-attr]
    assert [len(p) for p in _positions(named)] == [2 * (MAX_CHAIN + 1), 2]  # whole, then a growth
    _check(t)
    t.remove_orphans(older_than_ms=0)  # every snapshot's chain kept: all are retained
    assert all(Path(p).exists() for p in _named_files(t, _metadata(t)))


def _rolled_back(warehouse: Path) -> tuple[Table, Snapshot]:
    """A table whose first file's vector grew over three commits, rolled back to the first
    (positions of 1, 2 deleted; those of 3-6 deleted, then taken back); that snapshot."""
    t = _table(warehouse)
    _upsert(t, list(range(60)), "a")
    _upsert(t, [1, 2], "u0-")
    back_to = t.latest_snapshot()
    assert back_to is not None
    _upsert(t, [3, 4], "u1-")
    _upsert(t, [5, 6], "u2-")
    t.rollback_to(back_to.id)
    return t, back_to


def test_a_vector_a_rollback_took_positions_from_starts_a_new_chain(warehouse: Path) -> None:
    t, _ = _rolled_back(warehouse)  # the handle's chain covers positions the vector lost
    _upsert(t, [40, 41], "r0-")
    _upsert(t, [42], "r1-")
    path, meta = _first_file(t)
    chain = _deletes_of(t, t.latest_snapshot().id)[path]  # type: ignore[union-attr]
    assert [len(p) for p in _positions(chain)] == [4, 1]  # whole again (1, 2, 40, 41), then 42
    assert sorted(np.concatenate(_positions(chain))) == sorted(deleted_positions(meta))
    _check(t)
    assert all(Path(p).exists() for p in _named_files(t, _metadata(t)))


def test_a_chain_whose_files_a_sync_deleted_is_never_named_again(warehouse: Path) -> None:
    """After a rollback, a sync that writes no snapshot (here a tag's) deletes the delete
    files only the rolled-back snapshots named; a vector grown back to what they covered
    must not name them again."""
    t, back_to = _rolled_back(warehouse)
    t.create_tag("back", back_to.id)  # its sync drops the rolled-back snapshots' files
    _upsert(t, [3, 4, 5, 6], "r0-")  # the vector the deleted chain covered, exactly
    assert all(Path(p).exists() for p in _named_files(t, _metadata(t)))
    _check(t)


def test_a_file_with_retractions_names_each_skipped_row_once(warehouse: Path) -> None:
    """A data file holding -D rows: dts skips them (its vector holds them from the
    start), then rows superseded later; the chain names each once."""
    t = _table(warehouse)
    w = t.new_write("w")
    w.write(_rows(list(range(30)), "a", ["+I"] * 25 + ["-D"] * 5))
    w.commit()
    w.close()
    for step, key in enumerate([0, 27, 3]):  # 27: a key the file holds as a retraction
        _upsert(t, [key], f"u{step}-")
    path, meta = _first_file(t)
    assert meta.delete_row_count == 5
    chain = _deletes_of(t, t.latest_snapshot().id)[path]  # type: ignore[union-attr]
    parts = _positions(chain)
    assert [p.tolist() for p in parts] == [[25, 26, 27, 28, 29], [0], [3]]
    assert sorted(np.concatenate(parts)) == sorted(deleted_positions(meta))
    _check(t)
