"""The peer benchmark's data: one base table and five overlapping upsert batches, written
once as Parquet for every interpreter (this project's and the peers' venv) to read. Only
the standard library at module level: the peers' interpreter imports it too."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BUCKETS = 4
BATCHES = 5
WARMUP_ROWS = 1_000


def generate(data_dir: Path, rows: int) -> None:
    """base.parquet (N rows) and upsert-<i>.parquet (N/5 rows each, half updates)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    def table(keys: Any, seed: int) -> Any:
        rng = np.random.default_rng(seed)
        n = len(keys)
        return pa.table(
            {
                "id": pa.array(keys, pa.int64()),
                "amount": rng.random(n),
                "qty": rng.integers(0, 1000, n),
                "name": pa.array(np.char.add("customer-", (keys % 10_000).astype(str))),
            }
        )

    rng = np.random.default_rng(1)
    pq.write_table(table(rng.permutation(rows), 2), data_dir / "base.parquet")
    per = max(1, rows // BATCHES)
    for i in range(BATCHES):
        updates = rng.choice(rows, per // 2, replace=False)
        fresh = np.arange(rows + i * per, rows + i * per + (per - per // 2))
        keys = rng.permutation(np.concatenate([updates, fresh]))
        pq.write_table(table(keys, 10 + i), data_dir / f"upsert-{i}.parquet")


def load(data_dir: Path, name: str) -> Any:
    import pyarrow.parquet as pq

    return pq.read_table(data_dir / name)


def batches(data_dir: Path) -> list[Any]:
    return [load(data_dir, f"upsert-{i}.parquet") for i in range(BATCHES)]


def expected(data_dir: Path) -> tuple[int, float]:
    """Row count and ``sum(amount)`` a merge-read must return: the last write of each key
    wins. Every system's read is checked against these."""
    import numpy as np

    tables = [load(data_dir, "base.parquet"), *batches(data_dir)]
    keys = np.concatenate([t["id"].to_numpy() for t in tables])
    amounts = np.concatenate([t["amount"].to_numpy() for t in tables])
    # np.unique on the reversed keys finds each key's first position there: its last write
    _, last = np.unique(keys[::-1], return_index=True)
    return len(last), float(amounts[::-1][last].sum())


def read_result(table: Any) -> dict[str, Any]:
    """What a read phase reports of the table it read: rows and ``sum(amount)`` (computed
    after the timed read), for the check against :func:`expected`."""
    import pyarrow.compute as pc

    return {"rows": table.num_rows, "amount_sum": pc.sum(table["amount"]).as_py() or 0.0}


def warmup(data: Any, work: Path, write: Callable[[Any, Path], object]) -> None:
    """One small write into a throwaway table first, for every system alike: the timed
    write then measures throughput, not one-time start-up (lazy imports, first calls)."""
    (work / "warmup").mkdir()
    write(data.slice(0, WARMUP_ROWS), work / "warmup")


class Stopwatch:
    """Wall and CPU seconds since it was made. CPU is every thread of this process, so
    ``cpu_seconds / seconds`` is the cores the timed section kept busy: on this 2-core
    machine, a phase near 2 is bounded by the cores, not by waiting."""

    def __init__(self) -> None:
        self._wall = time.perf_counter()
        self._cpu = time.process_time()

    def elapsed(self) -> dict[str, float]:
        return {
            "seconds": time.perf_counter() - self._wall,
            "cpu_seconds": time.process_time() - self._cpu,
        }


def upsert_seconds(write: Callable[[Any], object], data_dir: Path) -> float:
    """Seconds to write the five upsert batches, one ``write`` (a commit) each, for every
    system alike (the read phases time the upserts they make before reading)."""
    watch = Stopwatch()
    for batch in batches(data_dir):
        write(batch)
    return watch.elapsed()["seconds"]


def timed_read(read: Callable[[], Any]) -> tuple[dict[str, float], float, Any]:
    """(``Stopwatch.elapsed`` of a second read, seconds of the first, what the second returned), for
    every system alike. The second read is the figure: like ``warmup`` for writes, it
    measures a read in a process that has read before, not what the first one costs
    for reasons unrelated to reading. The first depends on what the process did
    before: a reader whose allocator the phase's writes already grew (pyarrow's, for
    this project's writes; Rust's, for deltalake's) skips page faults that a reader
    with its own allocator (polars) pays once. Both are reported."""
    started = time.perf_counter()
    read()
    first = time.perf_counter() - started
    watch = Stopwatch()
    result = read()
    return watch.elapsed(), first, result
