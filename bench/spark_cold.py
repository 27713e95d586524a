"""First query vs warm queries of one table, in a fresh local Spark session (its own JVM).

    python -m bench.spark_cold --warehouse W --table b.t --reader dts|by-name|parquet

"cold" is the first `count(*), sum(amount)` of the table in a session that has run
only `spark.range` (executors up, nothing of the table or of Parquet read yet);
"warm" the median of the next three. The same measurement of `spark.read.parquet`
over the table's data files shows what Spark's own first query costs on this machine,
so dts's cold/warm ratio can be read against it; `--warm-up` registers with
`warm_up=True` (the seconds `register` took are reported). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

AGG = ["count(*)", "sum(amount)"]
READERS = ("dts", "by-name", "parquet")


def data_files(warehouse: str, name: str) -> list[str]:
    """The live data files of `name`'s latest snapshot, as Spark paths."""
    from bridge.spark.native.scan import data_file_paths
    from filestore import Catalog

    t = Catalog(warehouse).get_table(name)
    return data_file_paths(warehouse, t, t.new_scan().plan())


def frame(spark: Any, reader: str, warehouse: str, name: str) -> Any:
    import bridge as dts

    if reader == "dts":
        return dts.table(spark, name, warehouse=warehouse)
    if reader == "by-name":
        return spark.table(name)
    return spark.read.parquet(*data_files(warehouse, name))


def measure(
    reader: str, warehouse: str, name: str, *, warm_up: bool = False, warm_runs: int = 3
) -> dict[str, float]:
    import bridge as dts
    from bridge.spark.session import local_session

    spark = local_session(f"bench-cold-{reader}", Path(tempfile.mkdtemp(prefix="bench-cold-")))
    try:
        spark.range(1000).selectExpr("sum(id)").collect()  # executors up
        t0 = time.perf_counter()
        dts.register(spark, warehouse=warehouse if reader == "by-name" else None, warm_up=warm_up)
        registered_s = time.perf_counter() - t0
        times = []
        for _ in range(1 + warm_runs):
            t0 = time.perf_counter()
            frame(spark, reader, warehouse, name).selectExpr(*AGG).collect()
            times.append(time.perf_counter() - t0)
    finally:
        spark.stop()
    return {"cold_s": times[0], "warm_s": statistics.median(times[1:]), "register_s": registered_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--reader", choices=READERS, required=True)
    ap.add_argument("--warm-up", action="store_true", help="dts.register(..., warm_up=True)")
    args = ap.parse_args()
    got = measure(args.reader, args.warehouse, args.table, warm_up=args.warm_up)
    print(json.dumps(got), flush=True)


if __name__ == "__main__":
    main()
