"""The stitched side as a Delta and Structured Streaming expert builds it (one Spark,
delta-spark 4.4.0; issue #42):

- **one** Kafka stream on the Debezium topic of orders whose ``foreachBatch`` persists the
  batch and writes all three tables from it, in one order: ``orders`` (each order's last
  change MERGEd: ``d`` deletes, the others upsert), ``orders_enriched`` (the same last
  changes joined with ``customers``, MERGEd: deleted when deleted or cancelled) and
  ``customer_totals`` (per customer the signed sums of the envelope's ``before`` (-1) and
  ``after`` (+1) images, MERGEd by adding: no change-data-feed hop, no second stream);
- every MERGE idempotent (``spark.databricks.delta.write.txnAppId``/``txnVersion`` = the
  batch id: a batch replayed after a crash commits nothing twice, which the additive
  totals need) and tagged with its batch (``commitInfo.userMetadata``), so a reader can
  pick the versions one batch wrote;
- the customers' snapshot loaded by a stream of its own before the orders' stream starts.

``SETTINGS`` are the session's settings; ``TABLE_PROPERTIES`` every table's. The probe
reads the tables in a process of its own (``delta_probe``, delta-rs), as dts's does.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from bench.pipeline.model import (
    BATCH_TAG,
    CUSTOMERS,
    ENRICHED,
    ORDERS,
    READ_TOGETHER,
    TOTALS,
    spark_size,
)
from bench.pipeline.readers_apart import DELTA_RS
from bench.pipeline.side import (
    DRIVER_MEMORY,
    ProbeProcess,
    announce_ready,
    await_count,
    check_queries,
    debezium_stream,
    readable_errors,
    side_args,
    spark_pid,
    stop_event,
    stop_queries,
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
APP_ID = "bench-pipeline-stitched"

SETTINGS = {
    "spark.sql.shuffle.partitions": "2",  # the cores
    # a new table version's state is rebuilt with this many tasks (the default, 50, is
    # sized for clusters: three tables committing every trigger paid it each time)
    "spark.databricks.delta.snapshotPartitions": "2",
    # compact small files after a commit once a partition has this many (default 50)
    "spark.databricks.delta.autoCompact.minNumFiles": "20",
    "spark.databricks.delta.properties.defaults.enableDeletionVectors": "true",
    "spark.driver.memory": DRIVER_MEMORY,  # as dts's side
    "spark.sql.streaming.stopTimeout": "30s",
}
TABLE_PROPERTIES = {
    "delta.enableDeletionVectors": "true",  # a MERGE marks the rows it replaces
    "delta.autoOptimize.autoCompact": "true",
    "delta.checkpointInterval": "10",
    # the log and removed files kept for the length of a run, not the 30 and 7 days'
    # defaults: each listing of the log stays short
    "delta.logRetentionDuration": "interval 1 hours",
    "delta.deletedFileRetentionDuration": "interval 1 hours",
}


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
            **SETTINGS,
        },
    )


def table_paths(work: Path) -> dict[str, str]:
    return {t: str(work / "delta" / t) for t in READ_TOGETHER}


class Stitched:
    def __init__(self, spark: Any, work: Path, ns: Any) -> None:
        self.spark = spark
        self.work = work
        self.ns = ns
        self.paths = table_paths(work)

    def ref(self, table: str) -> str:
        return f"delta.`{self.paths[table]}`"

    def create(self) -> None:
        props = ", ".join(f"'{k}' = '{v}'" for k, v in TABLE_PROPERTIES.items())
        for table, columns in _COLUMNS.items():
            self.spark.sql(
                f"CREATE TABLE {self.ref(table)} ({columns}) USING delta TBLPROPERTIES ({props})"
            )

    def _query(self, df: Any, name: str, fn: Any) -> Any:
        return (
            df.writeStream.foreachBatch(fn)
            .queryName(name)
            .option("checkpointLocation", str(self.work / "checkpoints" / name))
            .trigger(processingTime=self.ns.trigger)
            .start()
        )

    def _kafka(self, topic: str, envelope: str) -> Any:
        return debezium_stream(self.spark, self.ns.bootstrap, topic, envelope)

    def load_customers(self) -> Any:
        """The customers' stream, awaited until their snapshot is in the Delta table."""
        query = self._query(
            self._kafka(self.ns.customers_topic, _CUSTOMER_ENVELOPE), "customers",
            lambda batch, batch_id: self._in_batch(batch, batch_id, self._customers),
        )  # fmt: skip
        await_count(
            lambda: self.spark.read.format("delta").load(self.paths[CUSTOMERS]).count(),
            self.ns.customers, 300, f"{CUSTOMERS} from {self.ns.customers_topic}",
        )  # fmt: skip
        return query

    def start(self) -> Any:
        return self._query(
            self._kafka(self.ns.topic, _ENVELOPE), "orders",
            lambda batch, batch_id: self._in_batch(batch, batch_id, self._orders),
        )  # fmt: skip

    def _in_batch(self, batch: Any, batch_id: int, write: Any) -> None:
        """``write(batch)`` with the batch persisted and every commit it makes idempotent
        and tagged with the batch id."""
        conf = {
            "spark.databricks.delta.write.txnAppId": APP_ID,
            "spark.databricks.delta.write.txnVersion": str(batch_id),
            "spark.databricks.delta.commitInfo.userMetadata": f"{BATCH_TAG}{batch_id}",
        }
        spark = batch.sparkSession
        for key, value in conf.items():
            spark.conf.set(key, value)
        # cached before the MERGEs start: Delta refuses a source whose cache fills while
        # it merges (DELTA_MERGE_SOURCE_CACHED_DURING_EXECUTION)
        batch = batch.persist()
        batch.count()
        try:
            write(batch)
        finally:
            batch.unpersist()
            for key in conf:
                spark.conf.unset(key)

    def _customers(self, batch: Any) -> None:
        last = _last_changes(batch, "customer_id", ("city",))
        self._merge(last, CUSTOMERS, "customer_id", ("city",), "s.op = 'd'")

    def _orders(self, batch: Any) -> None:
        last = _last_changes(batch, "order_id", _VALUES)  # from the cached batch, twice
        self._merge(last, ORDERS, "order_id", _VALUES, "s.op = 'd'")
        self._merge_enriched(last)
        self._merge_totals(batch)

    def _merge(self, src: Any, table: str, key: str, values: tuple[str, ...], gone: str) -> None:
        """Upsert ``src`` by ``key``; a row matching ``gone`` deletes."""
        sets = ", ".join(f"{c} = s.{c}" for c in values)
        cols = (key, *values)
        src.createOrReplaceTempView("src")
        src.sparkSession.sql(f"""
            MERGE INTO {self.ref(table)} t USING src s ON t.{key} = s.{key}
            WHEN MATCHED AND ({gone}) THEN DELETE
            WHEN MATCHED THEN UPDATE SET {sets}
            WHEN NOT MATCHED AND NOT ({gone}) THEN INSERT ({", ".join(cols)})
              VALUES ({", ".join(f"s.{c}" for c in cols)})
        """)  # fmt: skip

    def _merge_enriched(self, last: Any) -> None:
        from pyspark.sql import functions as F

        customers = self.spark.read.format("delta").load(self.paths[CUSTOMERS])
        src = last.withColumn("size", spark_size(F)).join(F.broadcast(customers), "customer_id")
        gone = "s.op = 'd' OR s.status = 'cancelled'"
        self._merge(src, ENRICHED, "order_id", (*_VALUES, "size", "city"), gone)

    def _merge_totals(self, batch: Any) -> None:
        """Per customer the batch's signed images: what each change took away (before) and
        added (after) while the order was not cancelled."""
        from pyspark.sql import functions as F

        images = batch.select(F.col("e.before").alias("i"), F.lit(-1).alias("sign")).unionByName(
            batch.select(F.col("e.after").alias("i"), F.lit(1).alias("sign"))
        )
        sums = (
            images.where("i IS NOT NULL AND i.status != 'cancelled'")
            .groupBy(F.col("i.customer_id").alias("customer_id"))
            .agg(
                F.sum("sign").cast("long").alias("open_orders"),
                F.sum(F.col("sign") * F.col("i.amount_cents")).cast("long").alias("total_cents"),
                F.max("i.event_ms").cast("long").alias("last_event_ms"),
            )
        )
        sums.createOrReplaceTempView("src")
        sums.sparkSession.sql(f"""
            MERGE INTO {self.ref(TOTALS)} t USING src s ON t.customer_id = s.customer_id
            WHEN MATCHED THEN UPDATE SET open_orders = t.open_orders + s.open_orders,
              total_cents = t.total_cents + s.total_cents,
              last_event_ms = greatest(t.last_event_ms, s.last_event_ms)
            WHEN NOT MATCHED THEN INSERT *
        """)  # fmt: skip


def _last_changes(batch: Any, key: str, values: tuple[str, ...]) -> Any:
    """Each key's last change in the batch: its op and its image (``before`` for a delete,
    so a deleted order keeps its customer for the join)."""
    from pyspark.sql import functions as F

    image = F.when(F.col("e.op") == "d", F.col("e.before")).otherwise(F.col("e.after"))
    return (
        batch.select(image.getField(key).alias(key), "e.op", image.alias("i"), "offset")
        .groupBy(key)  # one key's changes are in one partition, in offset order
        .agg(F.max_by(F.struct("op", "i"), "offset").alias("c"))
        .select(key, "c.op", *[F.col(f"c.i.{c}").alias(c) for c in values])
    )


def main() -> None:
    ns = side_args(__doc__)
    stop = stop_event()
    spark = session(ns.work)
    with contextlib.ExitStack() as stack, readable_errors():
        from bridge.demo.pipeline import stop_spark

        stack.callback(stop_spark, spark)
        stitched = Stitched(spark, ns.work, ns)
        stitched.create()
        queries = [stitched.load_customers(), stitched.start()]
        stack.callback(stop_queries, queries)
        paths = [f"{t}={p}" for t, p in stitched.paths.items()]
        probe = ProbeProcess("bench.pipeline.delta_probe", ns, ["--paths", *paths], DELTA_RS.env())
        stack.callback(probe.stop)
        announce_ready(ns.work, {"spark": spark_pid(), "probe": probe.pid})
        while not stop.is_set():
            probe.check()
            check_queries(queries)
            stop.wait(1.0)


if __name__ == "__main__":
    main()
