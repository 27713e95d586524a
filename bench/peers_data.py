"""The peer benchmark's data: one base table and five overlapping upsert batches, written
once as Parquet for every interpreter (this project's and the peers' venv) to read. Only
the standard library at module level: the peers' interpreter imports it too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

BUCKETS = 4
BATCHES = 5


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
