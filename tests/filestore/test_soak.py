"""Soak: 300 small commits with auto-compaction and expiration keep a table small and fast."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from filestore import Catalog
from filestore.state.levels import run_counts


@pytest.mark.slow
def test_300_commits_stay_bounded(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table(
        "db.soak",
        pa.schema([("id", pa.int64()), ("v", pa.int64())]),
        primary_key=["id"],
        options={"bucket": "2", "snapshot.num-retained.max": "20"},
    )
    rng = np.random.default_rng(7)
    oracle: dict[int, int] = {}
    w = t.new_write("soak")
    root = Path(t.paths.root)
    max_runs = max_files = 0
    for i in range(300):
        ids = rng.integers(0, 500, 40)
        w.write(pa.table({"id": ids, "v": np.full(40, i)}))
        oracle.update(dict.fromkeys(ids.tolist(), i))
        if i % 10 == 9:
            dead = rng.integers(0, 500, 5)
            w.write(pa.table({"id": dead, "v": np.zeros(5, np.int64), "_row_kind": ["-D"] * 5}))
            for k in dead.tolist():
                oracle.pop(k, None)
        w.commit()
        max_runs = max(max_runs, *run_counts(t, t.latest_snapshot()).values())
        max_files = max(max_files, sum(1 for _ in root.rglob("*-*.parquet")))
    trigger = t.options.num_sorted_run_compaction_trigger
    assert max_runs < trigger  # auto-compaction runs after every commit that reaches it
    assert w.stall_count == 0
    assert len(t.snapshots()) == 20
    # files on disk: what 20 retained snapshots need, far below one file per commit
    assert max_files < 120, max_files
    manifests = sum(1 for _ in (root / "manifest").iterdir())
    assert manifests < 200, manifests
    got = dict(zip(*[t.read().column(c).to_pylist() for c in ("id", "v")], strict=True))
    assert got == oracle
