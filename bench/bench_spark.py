"""Spark bridge benchmark: batch scans vs spark.read.parquet of the same rows (see
`bench.spark_batch`: compacted and upserted primary-key table, cold and warm), the
`dts` Python source vs parquet on an append table, streaming reads of the log tier
vs the FileStore tier (Trigger.AvailableNow, noop sink), and the log tier's
write-to-visible latency (a barrier every 0.5 s, p50/p99; target p99 <= 1.5 s).

    python -m bench.bench_spark --rows 1000000 --batch-rows 5000000 --out bench/results/spark.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.spark_peers.common import stream_noop


def _data(n: int) -> pa.Table:
    rng = np.random.default_rng(7)
    return pa.table(
        {
            "id": np.arange(n, dtype=np.int64),
            "k": pa.array(rng.integers(0, 1000, n)).cast(pa.string()),
            "v": rng.random(n),
        }
    )


def _spark() -> Any:
    from bridge.spark.session import local_session

    return local_session("bench-spark")


def _timed(label: str, fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    print(f"  {label:<44} {dt:8.2f} s", flush=True)
    return dt


def log_latency(
    spark: Any, cat: Any, wh: str, bootstrap: str, ck: Path, barriers: int = 40
) -> dict[str, float]:
    """A producer closes a barrier every 0.5 s (barrier.interval=0.5s) with a few rows; a
    live log-tier stream (processingTime 0) notes when each barrier's rows first reach
    `foreachBatch`. Latency = that moment - the barrier's transaction commit."""
    import threading
    import time as _time

    from bridge.tables import open_log_writer

    t = cat.create_table(
        "b.lat", _data(1).schema, options={"bucket": "2", "log.topic": "bench-spark-lat"}
    )
    written: dict[int, float] = {}
    seen: dict[int, float] = {}

    def on_batch(df: Any, _id: int) -> None:
        now = _time.monotonic()
        for b in set(df.select("_barrier").toArrow().column(0).to_pylist()):
            seen.setdefault(b, now)

    q = (
        spark.readStream.format("dts")
        .option("warehouse", wh)
        .option("tier", "log")
        .option("bootstrap", bootstrap)
        .load("b.lat")
        .writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", str(ck))
        .trigger(processingTime="0 seconds")
        .start()
    )
    stop = threading.Event()
    try:
        with open_log_writer(t, bootstrap, barrier_interval_s=None) as w:
            for i in range(barriers + 5):
                w.write(_data(20).set_column(0, "id", pa.array(range(i * 20, i * 20 + 20))))
                b = w.barrier()
                if i >= 5:  # the first ones warm the query up (workers, consumers)
                    written[b] = _time.monotonic()
                stop.wait(0.5)
        deadline = _time.monotonic() + 60
        while not set(written) <= set(seen) and _time.monotonic() < deadline:
            _time.sleep(0.05)
    finally:
        q.stop()
    lags = sorted(seen[b] - at for b, at in written.items() if b in seen)
    missing = len(written) - len(lags)
    p50 = lags[len(lags) // 2]
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    print(
        f"  log tier write-to-visible: p50 {p50:.2f} s, p99 {p99:.2f} s, max {lags[-1]:.2f} s "
        f"over {len(lags)} barriers ({missing} not seen) (target p99 <= 1.5 s)",
        flush=True,
    )
    return {"log_latency_p50_s": p50, "log_latency_p99_s": p99, "log_latency_missing": missing}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch-rows", type=int, default=5_000_000)
    ap.add_argument("--out", type=Path, default=Path("bench/results/spark.json"))
    args = ap.parse_args()
    n = args.rows
    import os

    from bench import spark_batch

    tmp0 = Path(tempfile.mkdtemp(prefix="bench-spark-batch-"))
    print(f"load average before: {os.getloadavg()}", flush=True)
    batch_res = spark_batch.run(args.batch_rows, tmp0)
    batch_ratios = spark_batch.report(args.batch_rows, batch_res)
    from bridge.tables import open_log_writer
    from filestore import Catalog
    from logstore.broker import EmbeddedBroker

    tmp = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    wh = str(tmp / "wh")
    print(f"spark bench: {n:,} rows, warehouse {wh}", flush=True)
    cat = Catalog(wh)
    cat.create_database("b")
    data = _data(n)
    t = cat.create_table("b.t", data.schema, options={"bucket": "2", "log.topic": "bench-spark-t"})
    w = t.new_write("bench")
    w.write(data)
    w.commit(barrier=1)
    files = [str(p) for p in (tmp / "wh" / "b.db" / "t").rglob("*.parquet")]
    spark = _spark()
    agg = ["sum(id)", "count(k)", "sum(v)"]
    results: dict[str, float] = {}
    print("batch read (sum over all columns):", flush=True)
    dts = spark.read.format("dts").option("warehouse", wh).load("b.t")
    pq = spark.read.parquet(*files)
    _timed("warm-up", lambda: pq.selectExpr(*agg).collect())
    results["dts_batch_cold_s"] = _timed(
        "dts source (first use: python workers start)", lambda: dts.selectExpr(*agg).collect()
    )
    results["dts_batch_s"] = _timed("dts source (warm)", lambda: dts.selectExpr(*agg).collect())
    results["parquet_batch_s"] = _timed(
        "spark.read.parquet (same files)", lambda: pq.selectExpr(*agg).collect()
    )
    print("streaming read (AvailableNow, noop sink):", flush=True)
    fs_stream = (
        spark.readStream.format("dts").option("warehouse", wh).option("tier", "file").load("b.t")
    )
    results["file_stream_s"] = _timed("file tier", lambda: stream_noop(fs_stream, tmp / "ck-file"))
    with EmbeddedBroker(log_path=tmp / "broker.log") as broker:

        def produce() -> None:
            with open_log_writer(t, broker.bootstrap, barrier_interval_s=None) as lw:
                for i, b in enumerate(data.to_batches(max_chunksize=200_000)):
                    lw.write(b)
                    lw.barrier(1000 + i)

        results["log_produce_s"] = _timed("(producing the log)", produce)
        log_stream = (
            spark.readStream.format("dts")
            .option("warehouse", wh)
            .option("tier", "log")
            .option("bootstrap", broker.bootstrap)
            .load("b.t")
        )
        results["log_stream_s"] = _timed(
            "log tier", lambda: stream_noop(log_stream, tmp / "ck-log")
        )
        latency = log_latency(spark, cat, wh, broker.bootstrap, tmp / "ck-lat")
    spark.stop()
    rate = {k.removesuffix("_s") + "_rows_per_s": n / v for k, v in results.items() if v > 0}
    print(f"load average after: {os.getloadavg()}", flush=True)
    print(f"\n{'what':<28}{'rows/s':>14}")
    for k, v in rate.items():
        print(f"{k.removesuffix('_rows_per_s'):<28}{v:>14,.0f}")
    ratios = {
        "dts_vs_parquet": results["parquet_batch_s"] / results["dts_batch_s"],
        "log_vs_file_stream": results["file_stream_s"] / results["log_stream_s"],
    }
    for k, v in ratios.items():
        print(f"{k:<28}{v:>14.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "rows": n,
                "seconds": results,
                "rates": rate,
                "ratios": ratios,
                "batch_rows": args.batch_rows,
                "batch_seconds": batch_res,
                "batch_ratios": batch_ratios,
                "log_latency": latency,
                "load_average": os.getloadavg(),
            },
            indent=2,
        )
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
