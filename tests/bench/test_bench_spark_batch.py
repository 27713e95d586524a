"""The Spark batch benchmark (bench/spark_batch, bench/spark_cold) cannot rot: the ratios
come from the right figures, and a fresh-session first-query run works through real Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.spark_batch import _rows, report

REPO = Path(__file__).resolve().parents[2]


def test_report_divides_parquet_by_dts_and_cold_by_warm(capsys: pytest.CaptureFixture[str]) -> None:
    res = {
        "dts_compacted_s": 0.5,
        "parquet_s": 1.0,
        "dts_upserted_s": 2.0,
        "parquet_again_s": 0.5,
        "by_name_compacted_s": 0.4,
        "parquet_by_name_s": 0.8,
        "by_name_upserted_s": 1.0,
        "parquet_by_name_again_s": 0.3,
        "dts_cold_s": 1.5,
        "dts_warm_fresh_s": 0.5,
        "by-name_cold_s": 1.2,
        "by-name_warm_fresh_s": 0.4,
        "by-name-warmed-up_cold_s": 0.6,
        "by-name-warmed-up_warm_fresh_s": 0.4,
        "parquet_cold_s": 3.0,
        "parquet_warm_fresh_s": 1.0,
    }
    ratios = report(1000, res)
    assert ratios["compacted_vs_parquet"] == pytest.approx(2.0)
    assert ratios["upserted_vs_parquet"] == pytest.approx(0.25)
    assert ratios["by_name_compacted_vs_parquet"] == pytest.approx(2.0)
    assert ratios["by_name_upserted_vs_parquet"] == pytest.approx(0.3)
    assert ratios["cold_over_warm"] == pytest.approx(3.0)
    assert ratios["by_name_warmed_up_cold_over_warm"] == pytest.approx(1.5)
    assert ratios["parquet_cold_over_warm"] == pytest.approx(3.0)
    assert ratios["cold_vs_parquet_cold"] == pytest.approx(2.0)
    assert "target <= 2.0x" in capsys.readouterr().out


@pytest.mark.spark
@pytest.mark.slow
def test_first_query_of_a_fresh_session_by_name_with_warm_up(tmp_path: Path) -> None:
    from filestore import Catalog

    wh = str(tmp_path / "wh")
    cat = Catalog(wh)
    cat.create_database("b")
    data = _rows(np.arange(2000, dtype=np.int64), 0)
    t = cat.create_table("b.t", data.schema, primary_key=["id", "dt"], options={"bucket": "2"})
    w = t.new_write("bench")
    w.write(data)
    w.commit()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    command = [sys.executable, "-m", "bench.spark_cold", "--warehouse", wh, "--table", "b.t"]
    command += ["--reader", "by-name", "--warm-up"]
    out = subprocess.run(
        command,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(got) == {"cold_s", "warm_s", "register_s"}
    assert all(v > 0 for v in got.values())
