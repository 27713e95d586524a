"""A stand-alone Spark driver for the restart tests: two `dts -> dts` streaming queries.

Run by tests/bridge/spark/test_spark_restart.py with the venv's python, in its own process
group, so the test can SIGKILL the whole driver (Python, JVM, Python workers) in the
middle of a micro-batch and then restart it from the same checkpoints.

- `file`: tier=file from `--file-src` (scan.mode=from-snapshot 1: every source
  snapshot is one micro-batch) into `--file-dst`;
- `log`: tier=log from `--log-src` (one barrier per micro-batch) into `--log-dst`.

Every row passes a Python UDF that touches `<signals>/<query>-<uuid>` and then
sleeps `--delay` seconds (no pandas here, so no mapInArrow), so a micro-batch takes
a while and the test knows when one is in flight. `--available-now` drains what is there and exits (the restart run).
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from pathlib import Path
from typing import Any


def _slow(signals: str, tag: str, delay_per_row: float) -> Any:
    """A UDF returning its input after a signal file and a sleep (a batch in flight)."""
    from pyspark.sql.functions import udf

    def run(v: float | None) -> float | None:
        Path(signals, f"{tag}-{uuid.uuid4().hex}").touch()
        time.sleep(delay_per_row)
        return v

    return udf(run, "double")


def _session() -> Any:
    from bridge.spark.session import local_session

    return local_session("dts-restart-driver")


def _query(spark: Any, args: argparse.Namespace, tier: str, src: str, dst: str) -> Any:
    reader = (
        spark.readStream.format("dts")
        .option("warehouse", args.warehouse)
        .option("tier", tier)
        .option("maxBarriersPerTrigger", "1")
    )
    if tier == "file":
        reader = reader.option("scan.mode", "from-snapshot").option("scan.snapshot-id", "1")
    else:
        reader = reader.option("bootstrap", args.bootstrap)
    df = reader.load(src)
    df = df.withColumn("v", _slow(args.signals, tier, args.delay)("v"))
    writer = (
        df.writeStream.format("dts")
        .queryName(f"restart-{tier}")
        .option("warehouse", args.warehouse)
        .option("checkpointLocation", str(Path(args.checkpoints) / tier))
    )
    writer = (
        writer.trigger(availableNow=True)
        if args.available_now
        else writer.trigger(processingTime="100 milliseconds")
    )
    return writer.start(dst)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--warehouse", required=True)
    p.add_argument("--checkpoints", required=True)
    p.add_argument("--signals", required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--file-src", required=True)
    p.add_argument("--file-dst", required=True)
    p.add_argument("--log-src", required=True)
    p.add_argument("--log-dst", required=True)
    p.add_argument("--delay", type=float, default=0.1, help="seconds of sleep per row")
    p.add_argument("--available-now", action="store_true")
    args = p.parse_args()
    spark = _session()
    queries = [
        _query(spark, args, "file", args.file_src, args.file_dst),
        _query(spark, args, "log", args.log_src, args.log_dst),
    ]
    print("driver: queries started", flush=True)
    # forever unless --available-now (the test SIGKILLs us); a failed query ends the driver
    while any(q.isActive for q in queries):
        try:
            spark.streams.awaitAnyTermination()
        except Exception as e:
            print(f"driver: a query failed: {e}", flush=True)
            os._exit(1)
        spark.streams.resetTerminated()
    print("driver: done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
