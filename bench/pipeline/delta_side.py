"""The stitched side, built as its users build it (one Spark, delta-spark 4.4.0):

1. Spark's Kafka source on the Debezium topic, ``from_json`` of the envelope, and in
   ``foreachBatch`` the last change of each order in the batch MERGEd into the Delta table
   ``orders`` (change data feed on): ``d`` deletes, others upsert; the same for the
   customers' topic into ``customers`` (its snapshot lands before the other streams start);
2. a stream on ``orders``' change data feed into ``orders_enriched``: per order its last
   change, joined with ``customers`` (broadcast, its latest version), MERGEd (deleted when
   deleted or cancelled, else upserted with its size band and its customer's city);
3. a second stream on the change feed into ``customer_totals``: per customer the signed
   sums of the batch (pre-images and deletes count negatively), MERGEd by adding.

Its best reasonable settings: deletion vectors on every table (a MERGE marks the rows it
replaces instead of rewriting their files), 2 shuffle partitions (the cores), the fair
scheduler (so the readers are not queued behind every MERGE), and the trigger interval
that keeps up best (``--delta-trigger``; the benchmark's default is measured, see
bench/README.md).

Every stream has the same processing-time trigger as dts's. The reader reads each table's
latest version, one after the other: the best Delta offers for "together".
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from bench.pipeline.model import (
    CUSTOMERS,
    ENRICHED,
    EVENT_COLUMN,
    ORDERS,
    READ_TOGETHER,
    TABLES,
    TOTALS,
    spark_size,
)
from bench.pipeline.probe import Sampler
from bench.pipeline.side import (
    SAMPLES,
    announce_ready,
    await_count,
    side_args,
    spark_pid,
    stop_event,
)

_IMAGE = "order_id BIGINT, customer_id BIGINT, status STRING, amount_cents BIGINT, event_ms BIGINT"
_ENVELOPE = f"before STRUCT<{_IMAGE}>, after STRUCT<{_IMAGE}>, op STRING"
_CUSTOMER = "customer_id BIGINT, city STRING"
_CUSTOMER_ENVELOPE = f"before STRUCT<{_CUSTOMER}>, after STRUCT<{_CUSTOMER}>, op STRING"
_COLUMNS = {
    ORDERS: _IMAGE,
    CUSTOMERS: _CUSTOMER,
    ENRICHED: f"{_IMAGE}, size STRING, city STRING",
    TOTALS: "customer_id BIGINT, open_orders BIGINT, total_cents BIGINT, last_event_ms BIGINT",
}
_VALUES = ("customer_id", "status", "amount_cents", "event_ms")


def session(work: Path) -> Any:
    from bench.spark_peers.__main__ import jar_dir
    from bench.spark_peers.common import connector_jars
    from bench.spark_peers.common import session as peer_session
    from bridge.spark.session import spark_kafka_jars

    where = jar_dir("delta")
    assert where is not None
    return peer_session(
        "bench-pipeline-delta",
        work / "spark",
        {
            "spark.jars": ",".join([*connector_jars(where), *spark_kafka_jars()]),
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.streaming.stopTimeout": "30s",
            # a query beside the streams gets task slots as they free up, not after
            # every queued MERGE (the FIFO default left the readers waiting for minutes)
            "spark.scheduler.mode": "FAIR",
        },
    )


class Stitched:
    def __init__(self, spark: Any, work: Path, ns: Any) -> None:
        self.spark = spark
        self.work = work
        self.ns = ns
        self.paths = {t: str(work / "delta" / t) for t in READ_TOGETHER}

    def ref(self, table: str) -> str:
        return f"delta.`{self.paths[table]}`"

    def create(self) -> None:
        for table, columns in _COLUMNS.items():
            props = ["delta.enableDeletionVectors = true"]  # MERGE marks rows, no rewrite
            if table == ORDERS:
                props.append("delta.enableChangeDataFeed = true")
            self.spark.sql(
                f"CREATE TABLE {self.ref(table)} ({columns}) USING delta "
                f"TBLPROPERTIES ({', '.join(props)})"
            )

    def _query(self, df: Any, name: str, fn: Any) -> Any:
        return (
            df.writeStream.foreachBatch(fn)
            .queryName(name)
            .option("checkpointLocation", str(self.work / "checkpoints" / name))
            .trigger(processingTime=self.ns.trigger)
            .start()
        )

    def _merge(self, batch: Any, sql: str) -> None:
        batch.createOrReplaceTempView("src")
        batch.sparkSession.sql(sql)

    def _kafka(self, topic: str, envelope: str) -> Any:
        from pyspark.sql import functions as F

        return (
            self.spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", self.ns.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .where("value IS NOT NULL")  # Debezium's tombstones after deletes
            .select(F.from_json(F.col("value").cast("string"), envelope).alias("e"), "offset")
        )

    def load_customers(self) -> Any:
        """The customers' stream, awaited until their snapshot is in the Delta table."""
        query = self._query(
            self._kafka(self.ns.customers_topic, _CUSTOMER_ENVELOPE), "customers",
            lambda batch, _: self._upsert(batch, CUSTOMERS, "customer_id", ("city",)),
        )  # fmt: skip
        await_count(
            lambda: self.spark.read.format("delta").load(self.paths[CUSTOMERS]).count(),
            self.ns.customers, 300, f"{CUSTOMERS} from {self.ns.customers_topic}",
        )  # fmt: skip
        return query

    def start(self) -> list[Any]:
        def changes() -> Any:
            return (
                self.spark.readStream.format("delta").option("readChangeFeed", "true")
                .load(self.paths[ORDERS])
            )  # fmt: skip

        return [
            self._query(
                self._kafka(self.ns.topic, _ENVELOPE),
                "orders",
                lambda batch, _: self._upsert(batch, ORDERS, "order_id", _VALUES),
            ),
            self._query(changes(), "orders_enriched", self._enriched),
            self._query(changes(), "customer_totals", self._totals),
        ]

    def _upsert(self, batch: Any, table: str, key: str, values: tuple[str, ...]) -> None:
        """Each key's last change in the batch MERGEd: ``d`` deletes, the others upsert."""
        from pyspark.sql import functions as F

        last = (
            batch.select(
                F.coalesce(f"e.after.{key}", f"e.before.{key}").alias(key),
                "e.op",
                "e.after",
                "offset",
            )
            .groupBy(key)  # one key's changes are in one partition, in offset order
            .agg(F.max_by(F.struct("op", "after"), "offset").alias("c"))
            .select(key, "c.op", *[F.col(f"c.after.{c}").alias(c) for c in values])
        )
        sets = ", ".join(f"{c} = s.{c}" for c in values)
        cols = ", ".join((key, *values))
        self._merge(last, f"""
            MERGE INTO {self.ref(table)} t USING src s ON t.{key} = s.{key}
            WHEN MATCHED AND s.op = 'd' THEN DELETE
            WHEN MATCHED THEN UPDATE SET {sets}
            WHEN NOT MATCHED AND s.op != 'd' THEN INSERT ({cols}) VALUES (s.{cols.replace(', ', ', s.')})
        """)  # fmt: skip

    def _enriched(self, batch: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        last = (
            batch.where("_change_type != 'update_preimage'")
            .groupBy("order_id")
            .agg(F.max_by(F.struct("_change_type", *_VALUES), F.col("_commit_version")).alias("c"))
            .select("order_id", "c.*")
            .withColumn("size", spark_size(F))
            .join(
                F.broadcast(self.spark.read.format("delta").load(self.paths[CUSTOMERS])),
                "customer_id",
            )
        )
        names = ("order_id", *_VALUES, "size", "city")
        sets = ", ".join(f"{c} = s.{c}" for c in names[1:])
        gone = "s._change_type = 'delete' OR s.status = 'cancelled'"
        self._merge(last, f"""
            MERGE INTO {self.ref(ENRICHED)} t USING src s ON t.order_id = s.order_id
            WHEN MATCHED AND ({gone}) THEN DELETE
            WHEN MATCHED THEN UPDATE SET {sets}
            WHEN NOT MATCHED AND NOT ({gone}) THEN INSERT ({", ".join(names)})
              VALUES ({", ".join(f"s.{c}" for c in names)})
        """)  # fmt: skip

    def _totals(self, batch: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        negative = F.col("_change_type").isin("update_preimage", "delete")
        sign = F.when(negative, F.lit(-1)).otherwise(F.lit(1))
        sums = (
            batch.where("status != 'cancelled'")
            .groupBy("customer_id")
            .agg(
                F.sum(sign).cast("long").alias("open_orders"),
                F.sum(sign * F.col("amount_cents")).cast("long").alias("total_cents"),
                F.max("event_ms").cast("long").alias("last_event_ms"),
            )
        )
        self._merge(sums, f"""
            MERGE INTO {self.ref(TOTALS)} t USING src s ON t.customer_id = s.customer_id
            WHEN MATCHED THEN UPDATE SET open_orders = t.open_orders + s.open_orders,
              total_cents = t.total_cents + s.total_cents,
              last_event_ms = greatest(t.last_event_ms, s.last_event_ms)
            WHEN NOT MATCHED THEN INSERT *
        """)  # fmt: skip

    def _reader_pool(self) -> None:
        """This thread's Spark jobs run in their own fair-scheduler pool."""
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", "readers")

    def fresh(self) -> dict[str, int | None]:
        """Each table's latest version: the newest change it shows."""
        self._reader_pool()
        out: dict[str, int | None] = {}
        for table in TABLES:
            path = self.paths[table]
            row = (
                self.spark.read.format("delta").load(path).agg({EVENT_COLUMN[table]: "max"}).first()
            )
            out[table] = int(row[0]) if row is not None and row[0] is not None else None
        return out

    def together(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Each table's latest version, one after the other: the best Delta offers for
        reading them together."""
        self._reader_pool()
        return {
            t: self.spark.read.format("delta").load(p).toArrow() for t, p in self.paths.items()
        }, {}


def main() -> None:
    ns = side_args(__doc__)
    stop = stop_event()
    spark = session(ns.work)
    stitched = Stitched(spark, ns.work, ns)
    stitched.create()
    queries = [stitched.load_customers(), *stitched.start()]
    sampler = Sampler(
        stitched.fresh, stitched.together, ns.work / SAMPLES, ns.probe_interval
    ).start()
    announce_ready(ns.work, {"spark": spark_pid()})
    try:
        while not stop.is_set():
            for q in queries:
                if q.exception() is not None:
                    raise RuntimeError(f"stream {q.name} failed: {q.exception()}")
            stop.wait(1.0)
    finally:
        sampler.stop()
        for q in queries:
            with contextlib.suppress(Exception):
                q.stop()
        from bridge.demo.pipeline import stop_spark

        stop_spark(spark)


if __name__ == "__main__":
    main()
