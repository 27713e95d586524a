"""Opt-in warm-up of a local session: `dts.register(spark, warm_up=True)`.

A JVM's first query pays for loading Spark's Parquet reader and its code generator:
on this project's 2-core machine a 5M-row `count(*), sum(...)` took 1.7 s first and
0.5 s after (Spark's own `spark.read.parquet`: 2.4 s and 0.9 s). One scan of a tiny
Parquet file at registration moves that cost to session set-up, for notebooks and
services whose first query should answer at warm speed. Off by default: it makes
`register` about a second slower. Local sessions only: executors elsewhere cannot
read the driver's temporary file (and would each need their own warm-up).
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

WARM_UP_CONF = "spark.dts.warm-up"
JOB_GROUP = "dts-warm-up"
ROWS = 10_000


def wants_warm_up(spark: Any, given: bool | None) -> bool:
    """`given`, else the session conf `spark.dts.warm-up` (default false)."""
    if given is not None:
        return given
    return str(spark.conf.get(WARM_UP_CONF, "false")).lower() in ("true", "1", "yes")


def warm_up(spark: Any) -> float | None:
    """Scan a small Parquet file with a filter and an aggregate; the seconds it took, or
    None when the session is not local (nothing run)."""
    if not str(spark.sparkContext.master).startswith("local"):
        return None
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dts-warm-up-") as where:
        ids = np.arange(ROWS, dtype=np.int64)
        pq.write_table(pa.table({"id": ids, "v": ids * 0.5}), f"{where}/part-0.parquet")
        spark.sparkContext.setJobGroup(JOB_GROUP, "dts: warm up the Parquet reader")
        try:
            df = spark.read.schema("id long, v double").parquet(where)
            df.where("id >= 0").selectExpr("count(*)", "sum(v)").collect()
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
            spark.sparkContext.setLocalProperty("spark.job.description", None)
    return time.perf_counter() - t0
