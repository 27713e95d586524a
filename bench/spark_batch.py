"""Batch scans through Spark vs `spark.read.parquet` of the same rows, in the same run.

A primary-key table of `--batch-rows` rows (10 partitions, 4 buckets) is written,
fully compacted and read with `dts.table` (no-merge splits by Spark's Parquet
reader) and by name (`spark.table`: planned the same way by the dts extension); then 5 overlapping upserts
of 10% of the keys each are written without compaction (every bucket must merge)
and read again. Each figure is `count(*), sum(amount)` including building the
DataFrame (planning: `dts.table` reads the snapshot and manifests, `spark.read.parquet`
lists the files); ratios are parquet seconds / dts seconds (1.0 = native speed).
"cold" is the first query of the table in a session that has only run `spark.range`
(executors up, nothing of the table or of Parquet read yet).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

AGG = ["count(*)", "sum(amount)"]
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


def _files(t: Any, warehouse: str) -> list[str]:
    from bridge.spark.native import spark_path

    keys = t.schema.partition_keys
    return [
        spark_path(warehouse, t.paths.data_file(keys, s.partition_values, s.bucket, f.file_name))
        for s in t.new_scan().plan()
        for f in s.files
    ]


def run(n: int, tmp: Path) -> dict[str, float]:
    import bridge as dts
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
    baseline = _files(t, wh)
    spark = local_session("bench-spark-batch", tmp / "spark-batch")
    res: dict[str, float] = {}
    agg = lambda df: df.selectExpr(*AGG).collect()  # noqa: E731
    spark.range(1000).selectExpr("sum(id)").collect()  # executors up
    res["dts_cold_s"] = _time(lambda: agg(dts.table(spark, "b.t", warehouse=wh)), runs=1)
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
        "cold_over_warm": res["dts_cold_s"] / res["dts_compacted_s"],
    }
    print(f"  batch scans of {n:,} rows, count(*) + sum(amount):")
    for k, v in res.items():
        print(f"    {k:<28}{v:8.2f} s")
    for k, v in ratios.items():
        goal = TARGETS.get(k)
        if k == "cold_over_warm":
            goal_s = "(target <= 2.0x)"
        else:
            goal_s = f"(target >= {goal}x)" if goal else "(for reference)"
        print(f"    {k:<28}{v:8.2f}x {goal_s}")
    return ratios
