"""Soak: a 2M-row upsert backlog drained by one worker, exact at every barrier."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from tests.bridge.worker.support import (
    SCHEMA,
    create_table,
    latest_barrier,
    log_writer,
    start_worker,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ROWS = 2_000_000
BARRIER_ROWS = 20_000
KEYS = 50_000


@dataclass
class UpsertOracle:
    """Random upserts and deletes over dense keys 0..KEYS-1, vectorized; the table's
    state is kept per barrier as (present, n) arrays (v is always f"v{n}")."""

    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(5))
    present: np.ndarray = field(default_factory=lambda: np.zeros(KEYS, bool))
    n: np.ndarray = field(default_factory=lambda: np.zeros(KEYS, np.int64))
    counter: int = 0
    at: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def batch(self, size: int) -> pa.Table:
        ids = self.rng.integers(0, KEYS, size)
        ns = np.arange(self.counter, self.counter + size, dtype=np.int64)
        self.counter += size
        delete = self.rng.random(size) < 0.2
        # the last change of each key in the batch decides its state
        rev_keys, rev_first = np.unique(ids[::-1], return_index=True)
        last = size - 1 - rev_first
        self.present[rev_keys] = ~delete[last]
        self.n[rev_keys] = ns[last]
        kinds = np.where(delete, "-D", "+U")
        return pa.table(
            {
                "id": ids,
                "v": pa.array(np.char.add("v", ns.astype(str)).astype(object)),
                "n": ns,
                "_row_kind": kinds.astype(object),
            }
        ).cast(pa.schema([*SCHEMA, pa.field("_row_kind", pa.string())]))

    def close_barrier(self, barrier: int) -> None:
        self.at[barrier] = (self.present.copy(), self.n.copy())

    def check(self, table: pa.Table, barrier: int) -> None:
        present, n = self.at[barrier]
        got = table.sort_by("id")
        want_ids = np.flatnonzero(present)
        assert got.column("id").to_numpy().tolist() == want_ids.tolist(), f"barrier {barrier}"
        assert np.array_equal(got.column("n").to_numpy(), n[want_ids]), f"barrier {barrier}"
        want_v = np.char.add("v", n[want_ids].astype(str))
        assert got.column("v").to_pylist() == want_v.tolist(), f"barrier {barrier}"


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_two_million_row_backlog_is_exact_at_every_barrier(  # type: ignore[no-untyped-def]
    broker, warehouse: Path, tmp_path: Path
) -> None:
    table = create_table(warehouse)
    oracle = UpsertOracle()
    writer = log_writer(table, broker.bootstrap)
    barriers = []
    for _ in range(ROWS // BARRIER_ROWS):
        writer.write(oracle.batch(BARRIER_ROWS))
        b = writer.barrier()
        oracle.close_barrier(b)
        barriers.append(b)
    writer.close(final_barrier=False)

    worker = start_worker(
        warehouse, broker.bootstrap, [table.name], f"g-{uuid.uuid4().hex[:8]}", tmp_path
    )
    try:
        wait_for(lambda: latest_barrier(table) == barriers[-1], 600, "the backlog", worker)
        rss = peak_rss_mib(worker.proc.pid)
        print(f"2M-row backlog drained; worker peak RSS {rss:.0f} MiB")
        assert rss < 2048, f"peak RSS {rss:.0f} MiB"
    finally:
        code = worker.stop()
    assert code == 0, worker.tail()

    snaps = {s.barrier: s.id for s in table.snapshots() if s.commit_kind == "APPEND"}
    # one snapshot per barrier (all within snapshot.time-retained), each exact
    assert sorted(snaps) == barriers
    for b in barriers:
        oracle.check(table.read(snapshot_id=snaps[b], columns=["id", "v", "n"]), b)
