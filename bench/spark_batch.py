"""Batch scans through Spark vs `spark.read.parquet` of the same rows, in the same run.

A primary-key table of `--batch-rows` rows (10 partitions, 4 buckets) is written,
fully compacted and read with `dts.table` (no-merge splits by Spark's Parquet
reader) and by name (`spark.table`: planned the same way by the dts extension); then 5 overlapping upserts
of 10% of the keys each are written without compaction (every bucket must merge)
and read again. Each figure is `count(*), sum(amount)` including building the
DataFrame (planning: `dts.table` reads the snapshot and manifests, `spark.read.parquet`
lists the files); ratios are parquet seconds / dts seconds (1.0 = native speed).
"cold" is the first query of the table in a fresh session (its own JVM, `bench.spark_cold`)
that has only run `spark.range`, against the median of the next three there; the same
for `spark.read.parquet` shows what Spark's own first query costs on this machine.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

AGG = ["count(*)", "sum(amount)"]
# (reader, dts.register(warm_up=...)) of the fresh-session first-query runs
COLD_RUNS = [("parquet", False), ("dts", False), ("by-name", False), ("by-name", True)]
TARGETS = {
    "compacted_vs_parquet": 0.8,
    "upserted_vs_parquet": 0.3,
    "by_name_compacted_vs_parquet": 0.8,
    "by_name_upserted_vs_parquet": 0.3,
}


def _rows(ids: np.ndarray, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "id": ids,
            "dt": pa.array((ids % 10).astype(str)),
            "customer": pa.array(rng.integers(0, 10_000, len(ids))).cast(pa.string()),
            "amount": rng.random(len(ids)) * 100,
        }
    )


def _time(fn: Any, runs: int = 3) -> float:
    """Median seconds of `runs` calls."""
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def _pair(a: Any, b: Any, runs: int = 5) -> tuple[float, float]:
    """Median seconds of `a` and of `b`, run alternately (a shared machine's load drifts;
    alternating exposes both to the same drift)."""
    ta, tb = [], []
    for _ in range(runs):
        ta.append(_time(a, runs=1))
        tb.append(_time(b, runs=1))
    return statistics.median(ta), statistics.median(tb)


def _cold(reader: str, warehouse: str, warm_up: bool = False) -> dict[str, float]:
    """`bench.spark_cold` for `reader` in its own process (a fresh JVM)."""
    command = [sys.executable, "-m", "bench.spark_cold", "--warehouse", warehouse]
    command += ["--table", "b.t", "--reader", reader] + (["--warm-up"] if warm_up else [])
    out = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def run(n: int, tmp: Path) -> dict[str, float]:
    import bridge as dts
    from bench.spark_cold import data_files
    from bridge.spark.session import local_session
    from filestore import Catalog

    wh = str(tmp / "wh-batch")
    cat = Catalog(wh)
    cat.create_database("b")
    schema = _rows(np.arange(1, dtype=np.int64), 0).schema
    t = cat.create_table(
        "b.t",
        schema,
        primary_key=["id", "dt"],
        partition_by=["dt"],
        options={"bucket": "4", "auto-compaction": "false"},
    )
    t0 = time.perf_counter()
    w = t.new_write("bench")
    for start in range(0, n, 1_000_000):
        w.write(_rows(np.arange(start, min(n, start + 1_000_000), dtype=np.int64), start))
    w.commit()
    t.compact(full=True)
    print(f"  wrote and compacted {n:,} rows in {time.perf_counter() - t0:.1f} s", flush=True)
    baseline = data_files(wh, "b.t")
    res: dict[str, float] = {}
    for reader, warm_up in COLD_RUNS:  # first queries, each in a fresh JVM
        label = reader + ("-warmed-up" if warm_up else "")
        print(f"  cold and warm first queries: {label} (fresh session)", flush=True)
        cold = _cold(reader, wh, warm_up)
        res[f"{label}_cold_s"] = cold["cold_s"]
        res[f"{label}_warm_fresh_s"] = cold["warm_s"]
        res[f"{label}_register_s"] = cold["register_s"]
    spark = local_session("bench-spark-batch", tmp / "spark-batch")

    def agg(df: Any) -> Any:
        return df.selectExpr(*AGG).collect()

    spark.range(1000).selectExpr("sum(id)").collect()  # executors up
    res["dts_compacted_s"], res["parquet_s"] = _pair(
        lambda: agg(dts.table(spark, "b.t", warehouse=wh)),
        lambda: agg(spark.read.parquet(*baseline)),
    )
    dts.register(spark, warehouse=wh)  # with the dts extension: reads by name plan natively
    res["by_name_compacted_s"], res["parquet_by_name_s"] = _pair(
        lambda: agg(spark.table("b.t")),
        lambda: agg(spark.read.parquet(*baseline)),
    )
    rng = np.random.default_rng(1)
    for i in range(5):  # overlapping upserts: 10% of the keys each, spread over every bucket
        ids = np.sort(rng.choice(n, n // 10, replace=False)).astype(np.int64)
        w = t.new_write("bench")
        w.write(_rows(ids, 100 + i))
        w.commit()
    agg(dts.table(spark, "b.t", warehouse=wh))  # Python workers up for the merge path
    res["dts_upserted_s"], res["parquet_again_s"] = _pair(
        lambda: agg(dts.table(spark, "b.t", warehouse=wh)),
        lambda: agg(spark.read.parquet(*baseline)),
    )
    res["by_name_upserted_s"], res["parquet_by_name_again_s"] = _pair(
        lambda: agg(spark.table("b.t")),
        lambda: agg(spark.read.parquet(*baseline)),
        runs=3,
    )
    spark.stop()
    return res


def report(n: int, res: dict[str, float]) -> dict[str, float]:
    ratios = {
        "compacted_vs_parquet": res["parquet_s"] / res["dts_compacted_s"],
        "upserted_vs_parquet": res["parquet_again_s"] / res["dts_upserted_s"],
        "by_name_compacted_vs_parquet": res["parquet_by_name_s"] / res["by_name_compacted_s"],
        "by_name_upserted_vs_parquet": res["parquet_by_name_again_s"] / res["by_name_upserted_s"],
        "cold_over_warm": res["dts_cold_s"] / res["dts_warm_fresh_s"],
        "by_name_cold_over_warm": res["by-name_cold_s"] / res["by-name_warm_fresh_s"],
        "by_name_warmed_up_cold_over_warm": res["by-name-warmed-up_cold_s"]
        / res["by-name-warmed-up_warm_fresh_s"],
        "parquet_cold_over_warm": res["parquet_cold_s"] / res["parquet_warm_fresh_s"],
        "cold_vs_parquet_cold": res["parquet_cold_s"] / res["dts_cold_s"],
    }
    print(f"  batch scans of {n:,} rows, count(*) + sum(amount):")
    for k, v in res.items():
        print(f"    {k:<36}{v:8.2f} s")
    for k, v in ratios.items():
        goal = TARGETS.get(k)
        if k in ("cold_over_warm", "by_name_cold_over_warm"):
            goal_s = "(target <= 2.0x)"
        elif k == "by_name_warmed_up_cold_over_warm":
            goal_s = "(target <= 2.0x; register(warm_up=True) paid the JVM's first scan)"
        elif k == "parquet_cold_over_warm":
            goal_s = "(Spark's own reader: the bound on this machine)"
        elif k == "cold_vs_parquet_cold":
            goal_s = "(first queries: parquet seconds / dts seconds)"
        else:
            goal_s = f"(target >= {goal}x)" if goal else "(for reference)"
        print(f"    {k:<36}{v:8.2f}x {goal_s}")
    return ratios
