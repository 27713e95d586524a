"""The Iceberg benchmark (bench/bench_iceberg.py) cannot rot: at a small size, pyiceberg
gives its own table dts's history through its upsert and delete, DuckDB reads the three
tables and sees dts's rows in each, and a source that saw other rows stops the run."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from rich.console import Console

from bench.bench_iceberg import _same_rows, commit_part, read_part, report
from filestore.iceberg.sync import IcebergSync
from tests.filestore.iceberg.test_iceberg_readers import READERS


def test_a_source_that_read_other_rows_stops_the_run() -> None:
    live = pa.table({"amount": [1.0, 2.0], "qty": [3, 4]})
    good = {
        "full": {"dts": [2], "pyiceberg_history": [2]},
        "aggregate": {"dts": [2, 3.0, 4], "pyiceberg_history": [2, 3.0, 4]},
    }
    _same_rows(good, live)
    for query, seen in (("full", [1]), ("aggregate", [2, 2.5, 4])):
        bad = {q: dict(v) for q, v in good.items()}
        bad[query]["pyiceberg_history"] = seen
        with pytest.raises(SystemExit, match="pyiceberg_history"):
            _same_rows(bad, live)


@pytest.mark.skipif(not (READERS / "bin" / "python").exists(), reason="no Iceberg readers")
def test_a_small_run_reads_the_same_rows_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DTS_ICEBERG_READERS", str(READERS))
    console = Console(quiet=True)
    read = read_part(tmp_path, 4000, 1, console)
    assert set(read["times"]["aggregate"]) == {
        "dts",
        "dts_ratio_0_2",
        "pyiceberg_history",
        "pyiceberg_one_append",
    }
    for query in ("aggregate", "full"):
        for seen in read["seen"][query].values():
            assert seen[0] == read["live_rows"] < 4000  # the deletes applied everywhere
    commit = commit_part(tmp_path, 3, 500, console, rounds=2)
    ratios = report(read, commit, console)
    assert commit["snapshots"]["primary_key"] >= 4
    assert {
        "read_aggregate_vs_history",
        "read_aggregate_ratio_0_2_vs_history",
        "commit_primary_key_wall",
        "commit_primary_key_attributed",
    } <= set(ratios)
    # each commit of a table with metadata paid a sync, timed inside that commit; the
    # plain tables none (the clock is put back after the part)
    for done in commit["rounds"]:
        for kind, synced in done["sync_times"].items():
            on = done["times"][kind]["iceberg"]
            assert len(synced) == len(on) == 3 and all(
                0 < s < t for s, t in zip(synced, on, strict=True)
            )
    assert IcebergSync.sync.__name__ == "sync"
    # at the defaults (0.05 with Iceberg metadata) the table rewrote the files its vectors
    # deleted a twentieth of, which the table at Paimon's 0.2 keeps
    files = read["dts_files"]
    assert files["dts"]["with_deletes"] < files["dts_ratio_0_2"]["with_deletes"], files
    assert all(r > 0 for r in ratios.values())
