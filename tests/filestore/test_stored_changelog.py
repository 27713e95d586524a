"""changelog-producer=auto (the default): every APPEND commit stores its exact changes.

Property: on random histories (upserts, deletes, compactions, overwrites, expiration)
the stored changelog between any two snapshots, replayed onto the state at the start,
gives the state at the end; ranges of APPEND and COMPACT snapshots are answered from
stored files (no diff), and a commit of new keys only stores no copy of its rows.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from filestore import Catalog, CommitProperties, Table
from filestore.format.snapshot import CommitKind

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("n", pa.int64())]
)
State = dict[int, dict[str, Any]]


def replay(start: State, changes: pa.Table) -> State:
    """Apply a changelog in order: +I/+U set the row, -U/-D remove it."""
    state = {k: dict(v) for k, v in start.items()}
    for row in changes.to_pylist():
        kind = row.pop("_row_kind")
        if kind in ("+I", "+U"):
            assert row["id"] not in state or kind == "+U", (kind, row)
            state[row["id"]] = row
        else:
            assert state.pop(row["id"], None) == row, (kind, row)  # the exact old row
    return state


def state_of(t: Table, sid: int) -> State:
    return {r["id"]: r for r in t.read(snapshot_id=sid).to_pylist()}


def _rows(ids: list[int], tag: str, kinds: list[str] | None = None) -> pa.Table:
    data: dict[str, Any] = {
        "id": pa.array(ids, pa.int64()),
        "v": [f"{tag}{i}" for i in ids],
        "n": pa.array([len(tag) * i for i in ids], pa.int64()),
    }
    if kinds is not None:
        data["_row_kind"] = kinds
    return pa.table(data)


def _used_diff(
    caplog: pytest.LogCaptureFixture, t: Table, start: int, end: int
) -> tuple[pa.Table, bool]:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="filestore.read.changes"):
        return t.changes(start, end), "computing the diff" in caplog.text


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_histories_replay_exactly(
    warehouse: Path, caplog: pytest.LogCaptureFixture, seed: int
) -> None:
    rnd = random.Random(seed)
    t = Catalog(str(warehouse)).create_table(
        f"db.t{seed}",
        SCHEMA,
        primary_key=["id"],
        options={"bucket": "2", "num-sorted-run.compaction-trigger": "3"},
    )
    assert t.options.changelog_producer == "auto"
    for step in range(14):
        op = rnd.choice(["upsert", "upsert", "upsert", "delete", "compact", "overwrite"])
        w = t.new_write("w")
        if op == "upsert":
            ids = rnd.sample(range(60), rnd.randint(1, 25))
            w.write(_rows(ids, f"s{step}-"))
            # sometimes a second flush in the same commit touching the same keys
            if rnd.random() < 0.3:
                w.flush()
                w.write(_rows(ids[: len(ids) // 2 + 1], f"t{step}-"))
            w.commit()
        elif op == "delete":
            ids = rnd.sample(range(60), rnd.randint(1, 10))
            w.write(_rows(ids, "", ["-D"] * len(ids)))
            w.commit()
        elif op == "compact":
            t.compact(full=rnd.random() < 0.5)
        else:
            ids = rnd.sample(range(60), rnd.randint(1, 10))
            w.write(_rows(ids, f"o{step}-"))
            messages = w.prepare()
            t.new_commit("w").commit(
                messages, CommitProperties(1000 + step, kind=CommitKind.OVERWRITE)
            )
        w.close()
    snaps = t.snapshots()
    states = {s.id: state_of(t, s.id) for s in snaps}
    for i, start in enumerate(snaps):
        for end in snaps[i:]:
            changes, diffed = _used_diff(caplog, t, start.id, end.id)
            assert replay(states[start.id], changes) == states[end.id], (seed, start.id, end.id)
            between = [s for s in snaps if start.id < s.id <= end.id]
            overwritten = any(s.commit_kind == CommitKind.OVERWRITE for s in between)
            assert diffed == overwritten, (start.id, end.id)


def test_update_pairs_and_deletes_carry_old_rows(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table("db.t", SCHEMA, primary_key=["id"])
    w = t.new_write("w")
    w.write(_rows([1, 2, 3], "a"))
    s1 = w.commit()
    w.write(_rows([1, 4], "bb"))
    s2 = w.commit()
    w.write(_rows([2, 9], "", ["-D", "-D"]))  # 9 was never there: no change
    s3 = w.commit()
    w.write(_rows([3], "a"))  # the same row again: no change
    s4 = w.commit()
    w.close()
    assert s1 and s2 and s3 and s4
    got = [(r["_row_kind"], r["id"], r["v"]) for r in t.changes(s1.id, s4.id).to_pylist()]
    assert sorted(got) == sorted(
        [("-U", 1, "a1"), ("+U", 1, "bb1"), ("+I", 4, "bb4"), ("-D", 2, "a2")]
    )
    i = got.index(("-U", 1, "a1"))
    assert got[i + 1] == ("+U", 1, "bb1")  # a pair is adjacent, -U first
    assert [s.changelog_record_count for s in t.snapshots()] == [3, 3, 1, 0]


def test_new_keys_list_their_data_files_as_changelog(warehouse: Path) -> None:
    """A commit of new keys only stores no copy; its data files survive expiration of
    the snapshots whose changelog named them, until a compaction replaces them."""
    t = Catalog(str(warehouse)).create_table(
        "db.t", SCHEMA, primary_key=["id"], options={"auto-compaction": "false"}
    )
    w = t.new_write("w")
    w.write(_rows(list(range(100)), "a"))
    s1 = w.commit()
    w.write(_rows([5, 200], "b"))
    s2 = w.commit()
    w.close()
    assert s1 and s2
    stored = {e.file.file_name for e in t.manifest_store.read_entries([s1.changelog_manifest_list])}
    assert stored and all(n.startswith("data-") for n in stored)
    assert len(list(Path(t.paths.root).rglob("changelog-*.parquet"))) == 1  # s2 updates key 5
    got = sorted((r["_row_kind"], r["id"]) for r in t.changes(s1.id, s2.id).to_pylist())
    assert got == [("+I", 200), ("+U", 5), ("-U", 5)]
    t.expire(retain_min=1, retain_max=1)
    assert t.read().num_rows == 101  # s1's data file, once listed as changelog, is kept
    assert all(any(Path(t.paths.root).rglob(n)) for n in stored)


def test_concurrent_writer_changelog_uses_the_row_it_replaced(warehouse: Path) -> None:
    """The lookup runs inside the commit attempt: a writer that prepared before another
    one committed still stores the other's row as its -U."""
    t = Catalog(str(warehouse)).create_table("db.t", SCHEMA, primary_key=["id"])
    a, b = t.new_write("a"), t.new_write("b")
    a.write(_rows([1], "a"))
    s1 = a.commit()
    a.write(_rows([1], "late"))
    prepared = a.prepare()
    b.write(_rows([1], "bb"))
    b.commit()
    s3 = t.new_commit("a").commit(prepared, CommitProperties(99))
    a.close()
    b.close()
    assert s1 and s3
    got = [(r["_row_kind"], r["v"]) for r in t.changes(s1.id, s3.id).to_pylist()]
    assert got == [("-U", "a1"), ("+U", "bb1"), ("-U", "bb1"), ("+U", "late1")]


def test_append_only_tables_list_new_files(warehouse: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("v", pa.string()), ("n", pa.int64())])
    t = Catalog(str(warehouse)).create_table("db.log", schema)
    w = t.new_write("w")
    w.write(_rows([1, 1, 2], "a").cast(schema))
    s1 = w.commit()
    w.write(_rows([3, 1], "a").cast(schema))
    s2 = w.commit()
    w.close()
    assert s1 and s2 and s2.changelog_record_count == 2
    got = sorted((r["_row_kind"], r["id"]) for r in t.changes(s1.id, s2.id).to_pylist())
    assert got == [("+I", 1), ("+I", 3)]
    assert not list(Path(t.paths.root).rglob("changelog-*.parquet"))


def test_a_writer_of_a_full_changelog_stores_it_as_written(warehouse: Path) -> None:
    """TableWrite(input_changelog=True): the rows (-U before +U, full -D) are the changes;
    no lookup reads the old files."""
    t = Catalog(str(warehouse)).create_table("db.t", SCHEMA, primary_key=["id"])
    w = t.new_write("w", input_changelog=True)
    w.write(_rows([1, 2], "a"))
    s1 = w.commit()
    w.write(pa.concat_tables([_rows([1], "a", ["-U"]), _rows([1], "bb", ["+U"])]))
    s2 = w.commit()
    w.close()
    assert s1 and s2
    got = [(r["_row_kind"], r["v"]) for r in t.changes(s1.id, s2.id).to_pylist()]
    assert got == [("-U", "a1"), ("+U", "bb1")]
    stored = t.manifest_store.read_entries([s2.changelog_manifest_list])
    assert all(e.file.file_name.startswith("changelog-") for e in stored)
