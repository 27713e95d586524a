"""A table handle keeps the data files its commits look up (``filestore.io.file_cache``):
a handle that commits again and again reads each file from disk once at most, within
``lookup.cache-max-memory-size``, and the changelog it stores is the same without it."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import filestore.state.bucket_file as bucket_file
from filestore import Catalog, Table
from filestore.commit.properties import CommitProperties
from filestore.io.file_cache import FileCache
from filestore.read.changes import _match_joined, _match_rows, diff_states

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("n", pa.int64())]
)


def _rows(ids: list[int], tag: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "v": [f"{tag}{i}" for i in ids],
            "n": pa.array([len(tag) * i for i in ids], pa.int64()),
        }
    )


def _table(warehouse: Path, name: str, **options: str) -> Table:
    opts = {"bucket": "2", "auto-compaction": "false", **options}
    return Catalog(str(warehouse)).create_table(name, SCHEMA, primary_key=["id"], options=opts)


@pytest.fixture
def disk_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The data files read from disk (every read of a bucket file goes through here)."""
    reads: list[str] = []
    real = bucket_file.read_bucket_file

    def counting(ctx: Any, partition: Any, bucket: int, f: Any) -> pa.Table:
        reads.append(f.file_name)
        return real(ctx, partition, bucket, f)

    monkeypatch.setattr(bucket_file, "read_bucket_file", counting)
    return reads


def _upserts(t: Table, rounds: int, seed: int) -> list[int]:
    rnd = random.Random(seed)
    w = t.new_write("w")
    w.write(_rows(list(range(200)), "base"))
    snaps = [w.commit()]
    for r in range(rounds):
        w.write(_rows(rnd.sample(range(300), 40), f"u{r}-"))
        snaps.append(w.commit())
    w.close()
    return [s.id for s in snaps if s is not None]


def _changes(t: Table, snaps: list[int]) -> list[tuple[Any, ...]]:
    rows = t.changes(snaps[0], snaps[-1]).to_pylist()
    return sorted((r["_row_kind"], r["id"], r["v"], r["n"]) for r in rows)


def test_a_handle_that_commits_repeatedly_reads_no_file_back(
    warehouse: Path, disk_reads: list[str]
) -> None:
    t = _table(warehouse, "db.cached")
    snaps = _upserts(t, rounds=4, seed=1)
    # every file the lookups needed was written through this handle: none read back
    assert disk_reads == []
    assert t.file_cache.hits > 0 and len(t.file_cache) > 0
    assert _changes(t, snaps)  # the updates were looked up: -U/+U pairs stored
    assert all(s.changelog_record_count for s in t.snapshots()[1:])


def test_another_handle_reads_each_file_once(warehouse: Path, disk_reads: list[str]) -> None:
    _upserts(_table(warehouse, "db.t"), rounds=2, seed=2)
    other = Catalog(str(warehouse)).get_table("db.t")
    w = other.new_write("other")
    for r in range(3):
        w.write(_rows(list(range(0, 300, 3)), f"o{r}-"))
        w.commit()
    w.close()
    assert disk_reads, "the first commit of a new handle reads the old files"
    assert len(disk_reads) == len(set(disk_reads)), "no file read twice"


def test_without_a_cache_the_stored_changelog_is_the_same(
    warehouse: Path, disk_reads: list[str]
) -> None:
    cached = _table(warehouse, "db.cached")
    uncached = _table(warehouse, "db.uncached", **{"lookup.cache-max-memory-size": "0"})
    assert uncached.options.lookup_cache_max_memory == 0
    got_cached = _changes(cached, _upserts(cached, rounds=5, seed=3))
    reads_before = len(disk_reads)
    got_uncached = _changes(uncached, _upserts(uncached, rounds=5, seed=3))
    assert len(uncached.file_cache) == 0
    assert len(disk_reads) > reads_before  # the lookups read from disk each time
    assert got_cached == got_uncached and got_cached


def _live_paths(t: Table) -> set[str]:
    latest = t.latest_snapshot()
    assert latest is not None
    return {t.data_path(e.partition, e.bucket, e.file.file_name) for e in t.live_entries(latest)}


@pytest.mark.parametrize("options", [{}, {"deletion-vectors.enabled": "true"}], ids=["mor", "dv"])
def test_files_a_commit_removes_leave_the_cache(warehouse: Path, options: dict[str, str]) -> None:
    """What the cache holds follows the live files, not its budget: a compaction through
    the handle takes the files it replaced out (the soak's worker held its 128 MB budget
    of compacted-away files within 17 minutes)."""
    t = _table(warehouse, "db.evict", **options)
    _upserts(t, rounds=6, seed=4)
    before = _live_paths(t)
    assert all(t.file_cache.holds(p) for p in before)  # written through this handle
    t.compact(full=True)
    after = _live_paths(t)
    assert before - after, "the compaction replaced no file"
    assert not [p for p in before - after if t.file_cache.holds(p)]
    # nothing else: the compaction's own output, written through the handle
    assert all(t.file_cache.holds(p) for p in after) and len(t.file_cache) == len(after)


@pytest.mark.parametrize("options", [{}, {"deletion-vectors.enabled": "true"}], ids=["mor", "dv"])
def test_files_another_handle_removes_leave_the_cache(
    warehouse: Path, options: dict[str, str]
) -> None:
    """Two handles with a cache each take turns committing and auto-compacting one table,
    as a stream's commits run in more than one of Spark's Python workers: each handle's cache
    keeps only live files, though half the compactions that removed its files were the
    other's (before, each kept every file the other compacted away until its budget:
    soak run 16's two sink workers grew ~2 MB a minute each)."""
    _table(warehouse, "db.turns", **options, **{"auto-compaction": "true"})
    caches = [FileCache(), FileCache()]
    rnd = random.Random(5)
    for turn in range(40):
        t = Catalog(str(warehouse)).get_table("db.turns")
        t.file_cache = caches[turn % 2]
        w = t.new_write(f"w{turn % 2}")
        w.write(_rows(rnd.sample(range(400), 60), f"t{turn}-"))
        w.commit()
        w.close()
    live = _live_paths(t)
    compacted = {s.id for s in t.snapshots() if s.commit_kind == "COMPACT"}
    assert len(compacted) >= 4, "too few compactions to have removed files"
    for cache in caches:
        assert len(cache) > 0
        assert not [p for p in cache.paths() if p not in live], "a dead file stayed cached"


def test_files_written_for_a_later_commit_stay_cached(warehouse: Path) -> None:
    """A commit that keeps only the live files keeps those the handle wrote for a commit
    still to come (the worker prepares a barrier's files while it commits the last):
    they are not live yet, and not dead."""
    t = _table(warehouse, "db.pending")
    _upserts(t, rounds=3, seed=6)
    later = t.new_write("later")
    later.write(_rows(list(range(0, 300, 5)), "later"))
    messages = later.prepare()
    pending = {
        t.data_path(m.partition, m.bucket, f.file_name) for m in messages for f in m.new_files
    }
    assert pending and all(t.file_cache.holds(p) for p in pending)
    before = _live_paths(t)
    t.compact(full=True)  # a commit that reads every live file, in between
    assert [p for p in before - _live_paths(t) if t.file_cache.holds(p)] == []
    assert all(t.file_cache.holds(p) for p in pending)
    t.new_commit("later").commit(messages, CommitProperties(1))
    later.close()
    assert pending <= _live_paths(t)
    assert all(t.file_cache.holds(p) for p in pending)


def test_a_file_whose_vector_grows_stays_cached(warehouse: Path) -> None:
    """A deletion vector that grows deletes and re-adds its file's entry: the file is
    still live, and the next commit's lookup finds it in the cache."""
    t = _table(warehouse, "db.vectors", bucket="1", **{"deletion-vectors.enabled": "true"})
    w = t.new_write("w")
    w.write(_rows(list(range(100)), "a"))
    w.commit()
    t.compact(full=True)
    (base,) = _live_paths(t)
    w.write(_rows(list(range(0, 100, 7)), "b"))  # upserts: base gets a vector
    w.commit()
    w.close()
    latest = t.latest_snapshot()
    assert latest is not None
    vectored = [e for e in t.live_entries(latest) if e.file.deletion_vector]
    assert [t.data_path(e.partition, e.bucket, e.file.file_name) for e in vectored] == [base]
    assert t.file_cache.holds(base)


def test_the_cache_keeps_the_most_recently_used_within_its_budget() -> None:
    cache = FileCache()
    tables = {name: pa.table({"x": np.arange(1000)}) for name in "abcd"}
    size = tables["a"].nbytes
    for name in "abc":
        cache.put(name, tables[name], budget=3 * size)
    assert cache.get("a") is tables["a"]  # a is now the most recently used
    cache.put("d", tables["d"], budget=3 * size)
    assert cache.get("b") is None  # the least recently used went
    assert {n for n in "acd" if cache.get(n) is not None} == set("acd")
    assert cache.nbytes == 3 * size
    cache.put("big", pa.table({"x": np.arange(10_000)}), budget=3 * size)
    assert cache.get("big") is None  # larger than the whole budget: not kept
    cache.put("e", tables["a"], budget=0)
    assert cache.get("e") is None


@pytest.mark.parametrize("seed", range(8))
def test_matching_integer_keys_by_search_equals_the_join(seed: int) -> None:
    rng = np.random.default_rng(seed)
    old_keys = rng.choice(500, rng.integers(0, 200), replace=False)
    new_keys = rng.choice(500, rng.integers(0, 200), replace=False)
    if seed % 2:  # sorted runs (a lookup's usual sides) and shuffled ones
        old_keys, new_keys = np.sort(old_keys), np.sort(new_keys)
    old = pa.table({"id": old_keys, "v": rng.integers(0, 3, len(old_keys))})
    new = pa.table({"id": new_keys, "v": rng.integers(0, 3, len(new_keys))})

    def pairs(m: tuple[np.ndarray, ...]) -> tuple[Any, ...]:
        gone, born, bo, bn = m
        return (
            sorted(old_keys[gone].tolist()),
            sorted(new_keys[born].tolist()),
            sorted(zip(old_keys[bo].tolist(), new_keys[bn].tolist(), strict=True)),
        )

    searched, joined = _match_rows(old, new, ["id"]), _match_joined(old, new, ["id"])
    assert pairs(searched) == pairs(joined)
    assert all(a == b for a, b in pairs(searched)[2])  # pairs share their key
    kinds = [r["_row_kind"] for r in diff_states(old, new, ["id"]).to_pylist()]
    changed = sum(1 for i, j in zip(*searched[2:], strict=True) if old["v"][i] != new["v"][j])
    assert kinds.count("-U") == kinds.count("+U") == changed
    assert kinds.count("-D") == len(searched[0]) and kinds.count("+I") == len(searched[1])


def test_repeated_keys_are_matched_by_the_join() -> None:
    old = pa.table({"id": [1, 1, 2], "v": [0, 1, 2]})
    new = pa.table({"id": [2, 3], "v": [5, 3]})
    assert [len(m) for m in _match_rows(old, new, ["id"])] == [2, 1, 1, 1]


@pytest.mark.parametrize("options", [{}, {"deletion-vectors.enabled": "true"}], ids=["mor", "dv"])
@pytest.mark.parametrize("seed", [1, 2])
def test_rows_of_keys_are_what_a_read_of_the_snapshot_shows(
    warehouse: Path, options: dict[str, str], seed: int
) -> None:
    """Point lookups (a log-tier stream's old rows) equal the merge read, on random
    histories of upserts, deletes and compactions; keys looked up again hit the cache."""
    rnd = random.Random(seed)
    t = _table(warehouse, f"db.k{seed}", **options)
    w = t.new_write("w")
    for step in range(10):
        op = rnd.choice(["upsert", "upsert", "delete", "compact"])
        if op == "compact":
            t.compact(full=rnd.random() < 0.5)
            continue
        ids = rnd.sample(range(80), rnd.randint(1, 30))
        data = _rows(ids, f"s{step}-")
        if op == "delete":
            data = data.append_column("_row_kind", pa.array(["-D"] * len(ids)))
        w.write(data)
        w.commit()
    w.close()
    fresh = Catalog(str(warehouse)).get_table(f"db.k{seed}")  # a reader's own handle
    for snap in t.snapshots():
        keys = pa.table({"id": pa.array(rnd.sample(range(90), 25), pa.int64())})
        assert sorted(_got(fresh, keys, snap.id)) == _rows_in(t, keys, snap.id), snap.id
    assert fresh.file_cache.hits > 0  # later snapshots share files the earlier ones read


def test_rows_of_composite_keys(warehouse: Path) -> None:
    a, b = pa.field("a", pa.string(), nullable=False), pa.field("b", pa.int64(), nullable=False)
    schema = pa.schema([a, b, ("v", pa.int64())])
    t = Catalog(str(warehouse)).create_table("db.c", schema, primary_key=["a", "b"])
    w = t.new_write("w")
    w.write(pa.table({"a": ["x", "x", "y"], "b": [1, 2, 1], "v": [1, 2, 3]}, schema))
    w.commit()
    w.write(pa.table({"a": ["x"], "b": [2], "v": [20]}, schema))
    snap = w.commit()
    w.close()
    assert snap is not None
    keys = pa.table({"a": ["x", "y", "z"], "b": [2, 1, 1]})
    got = t.rows_of_keys(keys, 0, snap.id).to_pylist()
    assert sorted((r["a"], r["b"], r["v"]) for r in got) == [("x", 2, 20), ("y", 1, 3)]


def test_rows_of_keys_needs_a_primary_key(warehouse: Path) -> None:
    from filestore.errors import FileStoreError

    t = Catalog(str(warehouse)).create_table("db.log", SCHEMA)
    w = t.new_write("w")
    w.write(_rows([1], "a"))
    snap = w.commit()
    w.close()
    assert snap is not None
    with pytest.raises(FileStoreError, match="no primary key"):
        t.rows_of_keys(pa.table({"id": [1]}), 0, snap.id)


def test_lookups_in_cached_files_start_no_threads(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threads pay off for decoding Parquet only: a lookup whose files the cache holds
    runs in the caller's thread (a log-tier task looks a few keys up every micro-batch);
    one that must read a file from disk still reads in threads."""
    import filestore.read.lookup as lookup

    t = _table(warehouse, "db.t")
    snaps = _upserts(t, rounds=3, seed=4)
    pools: list[int] = []
    real = lookup.parallel_map

    def counted(fn: Any, items: Any) -> Any:
        todo = list(items)
        pools.append(len(todo))
        return real(fn, todo)

    monkeypatch.setattr(lookup, "parallel_map", counted)
    keys = pa.table({"id": pa.array(list(range(0, 300, 7)), pa.int64())})
    want = _rows_in(t, keys, snaps[-1])
    assert sorted(_got(t, keys, snaps[-1])) == want  # every file written by this handle
    assert pools == []
    fresh = Catalog(str(warehouse)).get_table("db.t")  # an empty cache: files from disk
    assert sorted(_got(fresh, keys, snaps[-1])) == want
    assert pools, "reading files from disk uses the threads"
    pools.clear()
    assert sorted(_got(fresh, keys, snaps[-1])) == want  # now cached
    assert pools == []


def _got(t: Table, keys: pa.Table, snap: int) -> list[tuple[Any, ...]]:
    rows = [t.rows_of_keys(keys, b, snap).to_pylist() for b in range(2)]
    return [(r["id"], r["v"], r["n"]) for part in rows for r in part]


def _rows_in(t: Table, keys: pa.Table, snap: int) -> list[tuple[Any, ...]]:
    wanted = set(keys["id"].to_pylist())
    rows = t.read(snapshot_id=snap).to_pylist()
    return sorted((r["id"], r["v"], r["n"]) for r in rows if r["id"] in wanted)
