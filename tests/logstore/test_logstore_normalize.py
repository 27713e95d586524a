"""Normalizer (upsert log -> full changelog) without a broker: spill path and key-only deletes."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.ipc as ipc

from logstore.normalize import Normalizer
from logstore.spec import LogSpec
from tests.logstore.support import random_rows

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("n", pa.int32())])
SPEC = LogSpec("t", SCHEMA, ["id"], 1)


def upsert_batches(seed: int, batches: int, size: int, keys: int) -> list[pa.Table]:
    rng = random.Random(seed)
    out = []
    for b in range(batches):
        ids = [rng.randrange(keys) for _ in range(size)]
        rows = random_rows(rng, SCHEMA, ids)
        rows = rows.set_column(1, "name", pa.array([f"b{b}r{i}" for i in range(size)]))
        kinds = ["-D" if rng.random() < 0.2 else "+I" for _ in ids]
        out.append(rows.append_column("_row_kind", pa.array(kinds)))
    return out


def test_spilled_state_gives_the_same_changelog(tmp_path: Path) -> None:
    batches = upsert_batches(seed=1, batches=12, size=40, keys=150)
    unbounded = Normalizer(SPEC)
    one_shard = Normalizer(SPEC, shards=1)
    bounded = Normalizer(SPEC, max_rows_in_memory=20, spill_dir=tmp_path, shards=8)
    try:
        for batch in batches:
            want = unbounded.process(batch)
            assert one_shard.process(batch).equals(want)  # sharding changes no output
            got = bounded.process(batch)
            assert got.equals(want)
            assert bounded.rows_in_memory <= 20 + batch.num_rows  # bounded after each batch
        assert bounded.spills > 0 and bounded.state_rows == unbounded.state_rows
        files = sorted(tmp_path.glob("shard-*.arrow"))
        assert files
        # spilled shards are plain Arrow IPC files holding state rows
        spilled = pa.concat_tables(ipc.open_file(f).read_all() for f in files)
        assert spilled.schema.names == SCHEMA.names and spilled.num_rows > 0
    finally:
        bounded.close()
        unbounded.close()
        one_shard.close()
    assert not list(tmp_path.glob("shard-*.arrow"))  # close removes its spill files


def test_key_only_delete_emits_full_row_from_state() -> None:
    norm = Normalizer(SPEC, max_rows_in_memory=1, shards=2)  # state spilled between batches
    try:
        norm.process(
            pa.table(
                {
                    "id": [1, 2],
                    "name": ["a", "b"],
                    "n": pa.array([5, 6], pa.int32()),
                    "_row_kind": ["+I", "+I"],
                }
            )
        )
        out = norm.process(
            pa.table(
                {
                    "id": [2, 9],
                    "name": pa.array([None, None], pa.string()),
                    "n": pa.array([None, None], pa.int32()),
                    "_row_kind": ["-D", "-D"],
                }
            )
        )
    finally:
        norm.close()
    assert out.to_pylist() == [{"id": 2, "name": "b", "n": 6, "_row_kind": "-D"}]  # 9: unknown


def test_retract_all_gives_every_live_row_spilled_or_not_then_forgets_them(
    tmp_path: Path,
) -> None:
    batches = upsert_batches(seed=2, batches=6, size=40, keys=150)
    unbounded = Normalizer(SPEC)
    bounded = Normalizer(SPEC, max_rows_in_memory=20, spill_dir=tmp_path, shards=8)
    try:
        for batch in batches:
            unbounded.process(batch)
            bounded.process(batch)
        assert bounded.spills > 0
        live = unbounded.state_rows
        got, want = bounded.retract_all(), unbounded.retract_all()
        assert got.num_rows == live > 0
        assert got.sort_by("id").equals(want.sort_by("id"))
        assert got.schema.names == [*SCHEMA.names, "_row_kind"]
        assert set(got.column("_row_kind").to_pylist()) == {"-D"}
        # the state is empty: every key is new again, and no spill file is left
        assert bounded.state_rows == 0 and not list(tmp_path.glob("shard-*.arrow"))
        again = random_rows(random.Random(3), SCHEMA, list(range(150)))  # each key once
        kinds = bounded.process(again).column("_row_kind").to_pylist()
        assert kinds == ["+I"] * 150
    finally:
        bounded.close()
        unbounded.close()


class _PeakMemory(Normalizer):
    """Records the most rows held in memory whenever a shard is brought in."""

    peak = 0

    def _shard(self, s: int) -> pl.DataFrame:
        df = super()._shard(s)
        self.peak = max(self.peak, self.rows_in_memory)
        return df


def _in_two_partitions(norm: Normalizer, keys: int, seed: int) -> pa.Table:
    """Keys 0..keys-1 processed once, even keys from log partition 0, odd from 1; the rows."""
    rows = random_rows(random.Random(seed), SCHEMA, list(range(keys)))
    parts = pa.array([i % 2 for i in range(keys)], pa.int32())
    norm.process(rows.append_column("_partition", parts))
    return rows


def test_retract_partition_brings_spilled_shards_back_one_at_a_time(tmp_path: Path) -> None:
    norm = _PeakMemory(
        SPEC, max_rows_in_memory=5, spill_dir=tmp_path, shards=8, partition_column="_partition"
    )
    try:
        _in_two_partitions(norm, 200, seed=5)
        assert norm.spills > 0 and norm.state_rows == 200
        norm.peak = 0
        assert norm.retract_partition(0).num_rows == 100
        # the bound and one shard (~25 rows), never the whole state
        assert 0 < norm.peak <= 5 + 60
        assert norm.rows_in_memory <= 5 and norm.state_rows == 100
    finally:
        norm.close()


def test_retract_partition_removes_that_partitions_rows_only(tmp_path: Path) -> None:
    norm = Normalizer(
        SPEC, max_rows_in_memory=3, spill_dir=tmp_path, shards=4, partition_column="_partition"
    )
    try:
        rows = _in_two_partitions(norm, 8, seed=4)
        assert norm.spills > 0
        gone = norm.retract_partition(1)
        assert sorted(gone.column("id").to_pylist()) == [1, 3, 5, 7]
        assert set(gone.column("_row_kind").to_pylist()) == {"-D"}
        assert norm.state_rows == 4 and norm.retract_partition(1).num_rows == 0
        # partition 0's keys are still known: re-inserting one unchanged emits nothing
        again = rows.slice(0, 1).append_column("_partition", pa.array([0], pa.int32()))
        assert norm.process(again).num_rows == 0
    finally:
        norm.close()
