"""Consistent versions without a MetaService read each table's snapshots newest first,
only as far as the answer needs: the same answers as the whole history gives
(``snapshot_barriers``), at a cost of the snapshots since the common barrier."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.consistency_read import resolve_version
from bridge.meta.filestore_source import FileStoreBarriers, snapshot_barriers
from filestore import Catalog
from filestore.errors import BarrierOrderError
from filestore.format.snapshot import Snapshot

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])


def _snap(i: int, barrier: int | None, kind: str) -> Snapshot:
    return Snapshot(
        id=i,
        schema_id=0,
        base_manifest_list="",
        delta_manifest_list="",
        changelog_manifest_list=None,
        commit_user="u",
        commit_identifier=i,
        commit_kind=kind,
        time_millis=1000 + i,
        barrier=barrier,
    )


@dataclass
class _Manager:
    snaps: list[Snapshot]
    read: list[int] = field(default_factory=list)

    def iter_backwards(self) -> Iterator[Snapshot]:
        for s in reversed(self.snaps):
            self.read.append(s.id)
            yield s


@dataclass
class _Table:
    snapshot_manager: _Manager


@dataclass
class _Catalog:
    tables: dict[str, _Table]

    def get_table(self, name: str) -> _Table:
        return self.tables[name]


# one table's history: per step, a new barrier (or none), and the snapshot's kind;
# barriers strictly increase per table, as the commit enforces
_steps = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from(["APPEND", "COMPACT", "OVERWRITE"])),
    max_size=25,
)


def _history(steps: list[tuple[int, str]]) -> list[Snapshot]:
    snaps, barrier = [], None
    for i, (grow, kind) in enumerate(steps, start=1):
        if grow and kind != "COMPACT":  # a compaction keeps the table's barrier
            barrier = (barrier or 0) + grow
        snaps.append(_snap(i, barrier if grow or kind == "COMPACT" else None, kind))
    return snaps


@settings(max_examples=200, deadline=None)
@given(histories=st.lists(_steps, min_size=1, max_size=3))
def test_the_walk_answers_as_the_whole_history_does(histories: list[list[tuple[int, str]]]) -> None:
    names = [f"db.t{i}" for i in range(len(histories))]
    snaps = {n: _history(h) for n, h in zip(names, histories, strict=True)}
    full = {n: snapshot_barriers(s) for n, s in snaps.items()}
    fake = _Catalog({n: _Table(_Manager(s)) for n, s in snaps.items()})
    walk = FileStoreBarriers(fake)  # type: ignore[arg-type]
    for n in names:
        want = full[n][max(full[n])] if full[n] else None
        assert walk.latest(n) == want
    common = set.intersection(*(set(p) for p in full.values()))
    assert walk.greatest_common(names) == (max(common) if common else None)
    probe = FileStoreBarriers(fake)  # type: ignore[arg-type]  # fresh: at() alone settles
    for n in names:
        for b in range(0, 30):
            assert probe.at(n, b) == full[n].get(b), (n, b)


def _committed(t: object, barrier: int | None, i: int) -> None:
    w = t.new_write("w")  # type: ignore[attr-defined]
    w.write(pa.table({"id": [i], "v": [i]}, schema=SCHEMA))
    w.commit(barrier=barrier)
    w.close()


def test_a_strong_read_reads_the_snapshots_since_the_common_barrier(
    tmp_path: Path, snapshot_reads: list[str]
) -> None:
    """Two tables with 40 barriers each, one a barrier behind: a strong read reads the
    few newest snapshots of each, not their histories (a table keeps an hour of them)."""
    cat = Catalog(str(tmp_path))
    src = cat.create_table("db.src", SCHEMA, primary_key=["id"])
    derived = cat.create_table("db.derived", SCHEMA, primary_key=["id"])
    for i in range(40):
        _committed(src, 1000 + i, i)
        if i < 39:
            _committed(derived, 1000 + i, i)
    want = {t.name: snapshot_barriers(t.snapshots())[1038].snapshot_id for t in (src, derived)}
    history = len(src.snapshots()) + len(derived.snapshots())
    read = snapshot_reads
    read.clear()  # what the set-up read does not count
    version = resolve_version(["db.src", "db.derived"], catalog=cat)
    assert version.barrier == 1038
    assert {v.table: v.snapshot_id for v in version.tables} == want
    assert len(read) <= 8 < history, read  # it read every snapshot of both


def test_a_barrier_older_than_one_before_a_write_without_a_barrier_is_refused(
    tmp_path: Path,
) -> None:
    """The order readers rely on: a batch write without a barrier in between does not
    let an older barrier in."""
    t = Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_key=["id"])
    _committed(t, 2000, 1)
    _committed(t, None, 2)
    with pytest.raises(BarrierOrderError, match="barrier 1500 is not newer than the table's"):
        _committed(t, 1500, 3)
    _committed(t, 2500, 4)
    assert [s.barrier for s in t.snapshots()] == [2000, None, 2500]
