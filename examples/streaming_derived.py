"""Spark streaming derived tables, read together at one consistent barrier (FLIP-276).

``examples.stream_orders`` gets three commits, each tagged with a barrier. Two Spark
streaming jobs derive ``examples.stream_big`` (orders of 500 cents or more) and
``examples.stream_totals`` (per-customer totals); each micro-batch commits with the
source barrier it consumed, so the three tables share barriers. A strong consistent
read then returns the three at the same barrier, where the totals match the orders.

    DTS_WAREHOUSE=./warehouse python examples/streaming_derived.py
    # with a MetaService (dts meta serve): DTS_META_URL=http://127.0.0.1:8765 ...
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from _common import META_URL, ORDERS_SCHEMA, WAREHOUSE, fresh_table, orders, spark_session
from pyspark.sql import functions as F

from bridge.consistency_read import consistent_read

SOURCE, BIG, TOTALS = "examples.stream_orders", "examples.stream_big", "examples.stream_totals"
DERIVED_OPTIONS = {"change-tracking": "false", "bucket": "1"}
TOTALS_SCHEMA = pa.schema(
    [
        pa.field("customer_id", pa.int64(), nullable=False),
        pa.field("orders", pa.int64()),
        pa.field("total_cents", pa.int64()),
    ]
)
BARRIERS = (1_000, 2_000, 3_000)
TIMEOUT_S = 180


def main() -> None:
    source = fresh_table(SOURCE, ORDERS_SCHEMA, ["order_id"], {"bucket": "1"})
    fresh_table(BIG, ORDERS_SCHEMA, ["order_id"], DERIVED_OPTIONS)
    fresh_table(TOTALS, TOTALS_SCHEMA, ["customer_id"], DERIVED_OPTIONS)
    write = source.new_write(commit_user="examples")
    write.write(orders([(i, i % 4, 250 * i, "new") for i in range(1, 9)]))
    write.commit(barrier=BARRIERS[0])

    spark = spark_session("examples-streaming")
    checkpoints = Path(tempfile.mkdtemp(prefix="dts-examples-ck-"))
    stream = spark.readStream.format("dts").option("warehouse", WAREHOUSE).option("tier", "file")
    # +I/+U count once, -U/-D take back: running sums equal the source's current state
    sign = F.when(F.col("_row_kind").isin("-U", "-D"), F.lit(-1)).otherwise(F.lit(1))
    # the filter keeps `_row_kind`: a -D (or a -U whose +U the filter drops) must reach
    # the sink as a retraction, or the derived table keeps a row its source removed
    jobs = {
        BIG: (stream.load(SOURCE).where("amount_cents >= 500"), "append"),
        TOTALS: (
            stream.load(SOURCE)
            .groupBy("customer_id")
            .agg(F.sum(sign).cast("long").alias("orders"),
                 F.sum(sign * F.col("amount_cents")).cast("long").alias("total_cents")),
            "complete",
        ),
    }  # fmt: skip
    queries = []
    try:
        for name, (df, mode) in jobs.items():
            sink = df.writeStream.format("dts").outputMode(mode).option("warehouse", WAREHOUSE)
            if META_URL:
                sink = sink.option("meta.url", META_URL)
            queries.append(
                sink.option("checkpointLocation", str(checkpoints / name))
                .trigger(processingTime="1 second")
                .start(name)
            )
        # more source commits while the jobs run: an update, a delete, new orders
        write.write(orders([(1, 1, 600, "paid"), (2, 2, 500, "x")], kinds=["+U", "-D"]))
        write.commit(barrier=BARRIERS[1])
        write.write(orders([(i, i % 4, 250 * i, "new") for i in range(9, 12)]))
        write.commit(barrier=BARRIERS[2])
        write.close()
        _wait_for_barrier(spark, queries, BARRIERS[-1])

        tables = consistent_read(spark, [SOURCE, BIG, TOTALS], warehouse=WAREHOUSE,
                                 meta_url=META_URL)  # fmt: skip
        print(f"strong consistent read at barrier {tables.version.barrier}")
        src = tables[SOURCE].collect()
        expected: dict[int, tuple[int, int]] = {}
        for r in src:
            n, total = expected.get(r.customer_id, (0, 0))
            expected[r.customer_id] = (n + 1, total + r.amount_cents)
        got = {r.customer_id: (r.orders, r.total_cents) for r in tables[TOTALS].collect()
               if r.orders}  # fmt: skip
        print(f"totals {got}")
        assert got == expected, (got, expected)
        big = sorted(r.order_id for r in tables[BIG].collect())
        assert big == sorted(r.order_id for r in src if r.amount_cents >= 500), big
    finally:
        for q in queries:
            q.stop()
        spark.stop()
        shutil.rmtree(checkpoints, ignore_errors=True)
    print("OK: the derived tables agree with their source at one barrier")


def _wait_for_barrier(spark: object, queries: list[Any], barrier: int) -> None:
    from filestore import Catalog

    catalog = Catalog(WAREHOUSE)
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        for q in queries:
            if q.exception() is not None:
                raise SystemExit(f"streaming job {q.name} failed: {q.exception()}")
        done = [
            (snap := catalog.get_table(t).latest_snapshot()) is not None
            and (snap.barrier or 0) >= barrier
            for t in (BIG, TOTALS)
        ]
        if all(done):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"the derived tables did not reach barrier {barrier} in {TIMEOUT_S} s")
        time.sleep(0.5)


if __name__ == "__main__":
    main()
