"""The FileStore peers benchmark (bench/bench_peers.py, part of `make bench`) cannot rot:
the expected result, the check, the ratios and the README section are tested on their
own, and the benchmark runs at a tiny scale: this project's read phases always, the
pypaimon-rust and deltalake phases when the peers' venv is already set up (`make bench`
creates it: a clone that never ran it tests this project's side only)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench.bench_peers import peers_ready
from bench.peers_data import BATCHES, expected, generate
from bench.peers_report import BEGIN, END, check, markdown, ratios
from bench.results import replace_section

ROOT = Path(__file__).resolve().parents[2]


def test_expected_is_the_last_write_of_each_key(tmp_path: Path) -> None:
    generate(tmp_path, 1000)
    last: dict[int, float] = {}
    names = ["base.parquet", *(f"upsert-{i}.parquet" for i in range(BATCHES))]
    for name in names:  # a plain dict merge, row by row: the slow, obvious way
        table = pq.read_table(tmp_path / name)
        last.update(zip(table["id"].to_pylist(), table["amount"].to_pylist(), strict=True))
    count, total = expected(tmp_path)
    assert count == len(last) == 1000 + BATCHES * 100  # half of each batch is new keys
    assert total == pytest.approx(sum(last.values()), rel=1e-12)


def test_check_compares_reads_with_the_input() -> None:
    want = (10, 5.0)
    good = {"rows": 10, "amount_sum": 5.0 + 1e-12}
    results = {
        "dts_read": good,
        "paimon_rust_read": {"rows": 10, "amount_sum": 5.5},  # a stale value
        "delta_read": {"rows": 11, "amount_sum": 5.0},  # a key twice
        "paimon_read": {"error": "boom"},  # failed: the table says so, not the check
        "raw_read": {"rows": 3, "amount_sum": 1.0},  # not a merge-read
    }
    problems = check(results, want)
    assert len(problems) == 2
    assert any(p.startswith("paimon_rust_read: got 10 rows, sum 5.5") for p in problems)
    assert any(p.startswith("delta_read: got 11 rows") for p in problems)
    assert check({"dts_read": good}, None) == []


def _rate(rows_per_s: float) -> dict[str, float]:
    return {"rows": 1000, "seconds": 1000 / rows_per_s, "rows_per_s": rows_per_s}


def test_ratios_carry_the_issue_targets() -> None:
    results = {
        "dts_write": _rate(1200.0),
        "delta_write": _rate(1000.0),
        "paimon_rust_write": _rate(1500.0),
        "dts_read": _rate(3000.0),
        "dts_read_dv": _rate(6000.0),
        "delta_read": _rate(2000.0),
        "paimon_rust_read": _rate(3000.0),
    }
    # the five upserts, timed by the phases that then read (write_seconds)
    results["dts_changes"] = {**_rate(5000.0), "write_seconds": 2.0}
    results["dts_read_dv"]["write_seconds"] = 2.5
    results["delta_read"]["write_seconds"] = 10.0
    results["paimon_rust_read"]["write_seconds"] = 3.0
    got = ratios(results)
    assert got["upserts, stored changelog, vs deltalake MERGE"] == (pytest.approx(5.0), None)
    assert got["upserts, stored changelog, vs pypaimon-rust"] == (pytest.approx(1.5), None)
    assert got["upserts, deletion vectors, vs deltalake MERGE"] == (pytest.approx(4.0), None)
    assert got["upserts, deletion vectors, vs pypaimon-rust"] == (pytest.approx(1.2), None)
    assert got["upserts with deletion vectors vs without (stored changelog both)"][
        0
    ] == pytest.approx(0.8)
    assert got["write vs deltalake merge (>= 1.2x)"] == (pytest.approx(1.2), 1.2)
    assert got["write vs pypaimon-rust (>= 1x)"] == (pytest.approx(0.8), 1.0)
    assert got["merge-read vs deltalake (>= 1.5x)"] == (pytest.approx(1.5), 1.5)
    assert got["merge-read vs pypaimon-rust"] == (pytest.approx(1.0), None)
    assert got["read with deletion vectors vs deltalake (>= 1.5x)"] == (pytest.approx(3.0), 1.5)
    assert got["read with deletion vectors vs pypaimon-rust merge-read"][0] == pytest.approx(2.0)
    assert got["write vs pypaimon (>= 10x)"] == (None, 10.0)  # not run: n/a, not a failure


def test_readme_section(tmp_path: Path) -> None:
    results = {name: {**_rate(1000.0), "peak_rss_bytes": 2**20} for name in ("dts_write",)}
    results["paimon_rust_write"] = {**_rate(2000.0), "peak_rss_bytes": 2**21}
    results["dts_read"] = {**_rate(4000.0), "first_seconds": 0.75, "peak_rss_bytes": 2**20}
    results["dts_read"]["cpu_seconds"] = 0.45  # 0.25 s wall: 1.8 cores busy
    results["delta_read"] = {"error": "boom"}
    doc = {
        "rows": 1000,
        "memory_rows": 0,
        "repeat": 2,
        "finished": "2026-01-01 00:00",
        "argv": ["--rows", "1000", "--out", "/tmp/x.json", "--readme=/tmp/README.md"],
        "load": {"before": 0.5, "after": 1.5, "cores": 2},
        "versions": {"dts": {"commit": "abc1234", "pyarrow": "1.0"}},
        "problems": [],
        "expected": {"rows": 1000, "amount_sum": 500.0},
        "results": results,
        "summary": {},
    }
    text = markdown(doc)
    assert "`python -m bench.bench_peers --rows 1000`" in text  # no paths of this machine
    assert "| paimon_rust_write | 1,000 | 0.50 |  | 2,000 |  | 2 |  |" in text
    # a read phase's figure is its second read; the first is shown beside it
    assert "| dts_read | 1,000 | 0.25 | 0.75 | 4,000 | 1.80 | 1 |  |" in text
    assert "| delta_read | - | - | - | failed | - | - | - |" in text
    assert "| write vs pypaimon-rust (>= 1x) | 0.50x | NO |" in text
    readme = tmp_path / "README.md"
    readme.write_text(f"# head\n{BEGIN}\nold\n{END}\ntail\n")
    replace_section(readme, BEGIN, END, text)
    assert readme.read_text() == f"# head\n{BEGIN}\n{text}{END}\ntail\n"


@pytest.mark.slow
def test_benchmark_runs_end_to_end_at_tiny_scale(tmp_path: Path) -> None:
    phases = ["raw_read", "dts_read", "dts_read_dv"]
    peers = ["paimon_rust_write", "paimon_rust_read", "delta_read"] if peers_ready() else []
    readme = tmp_path / "README.md"
    readme.write_text(f"# bench\n{BEGIN}\n{END}\n")
    out = tmp_path / "peers.json"
    cmd = [sys.executable, "-m", "bench.bench_peers", "--rows", "2000", "--only", *phases]
    cmd += [*peers, "--out", str(out), "--readme", str(readme)]
    if not peers:
        cmd.append("--skip-peers")  # never create the peers' venv from a test
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["problems"] == []  # every merge-read returned the input's count and sum
    assert set(doc["results"]) == {*phases, *peers}
    for name in [*phases, *peers]:
        assert "error" not in doc["results"][name], doc["results"][name]
        assert doc["results"][name]["rows_per_s"] > 0
        # the timed section's CPU, every thread of the phase's process
        assert doc["results"][name]["cpu_seconds"] > 0
    assert doc["results"]["dts_read"]["rows"] == doc["expected"]["rows"] == 2000 + 5 * 200
    assert "| dts_read | 3,000 |" in readme.read_text()
