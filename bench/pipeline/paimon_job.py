"""The stitched side's Paimon variant, its Spark job (issue #42): the pipeline as Paimon's
documentation has CDC into Paimon done with Spark, on Paimon's Spark runtime 0.9.0
(PySpark 3.5.2, in the Paimon virtual environment of bench/spark_peers; started by
``paimon_side``, which runs in the project's):

- ``orders``: Spark's Kafka source on the Debezium topic into a primary-key table through
  Paimon's streaming sink (exactly once: its commits carry the micro-batch id). The row
  kind comes from a field (``rowkind.field``: ``c``/``r`` insert, ``u`` update, ``d``
  delete with the ``before`` image) and the order of one key's changes from another
  (``sequence.field`` = the change's Kafka offset: one key's changes are in one partition);
  ``changelog-producer = lookup`` makes the table's own changelog (``-U``/``+U`` pairs
  and ``-D`` with the old row) at each commit;
- ``orders_enriched``: a streaming read of that changelog (``read.changelog``), each
  micro-batch reduced to every order's last change, joined with ``customers``, written as
  upserts and deletes (``rowkind.field``; a cancelled order is deleted);
- ``customer_totals``: a second streaming read of the changelog, each change signed (an
  ``+I``/``+U`` adds its order, a ``-U``/``-D`` takes it away) into a table whose
  ``merge-engine = aggregation`` sums them (``last_event_ms``: max), through the
  exactly-once sink: no read-modify-write in the job;
- ``customers`` loaded by a stream of its own before the orders' streams start.

Only the standard library, PySpark and the stdlib-only helpers of ``bench.spark_peers.common``
and ``bench.pipeline.side`` are imported: this interpreter has neither pyarrow nor the
project. ``TABLE_PROPERTIES`` and ``SETTINGS`` are every setting that is not Paimon's or
Spark's default.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from bench.pipeline.side import (
    DRIVER_MEMORY,
    await_count,
    check_queries,
    debezium_stream,
    readable_errors,
    side_args,
    stop_event,
    stop_queries,
)

DB = "bench"
ORDERS, CUSTOMERS, ENRICHED, TOTALS = "orders", "customers", "orders_enriched", "customer_totals"
#: the file the job writes once its streams run (the side waits for it)
JOB_READY = "job-ready"

_IMAGE = "order_id BIGINT, customer_id BIGINT, status STRING, amount_cents BIGINT, event_ms BIGINT"
_ENVELOPE = f"before STRUCT<{_IMAGE}>, after STRUCT<{_IMAGE}>, op STRING"
_CUSTOMER_ENVELOPE = "before STRUCT<customer_id BIGINT, city STRING>, " \
    "after STRUCT<customer_id BIGINT, city STRING>, op STRING"  # fmt: skip
_ORDER_COLUMNS = ("order_id", "customer_id", "status", "amount_cents", "event_ms")

_KEYED = "order_id BIGINT NOT NULL, customer_id BIGINT, status STRING, amount_cents BIGINT, " \
    "event_ms BIGINT"  # fmt: skip
COLUMNS = {
    ORDERS: f"{_KEYED}, _rk STRING, _pos BIGINT",
    CUSTOMERS: "customer_id BIGINT NOT NULL, city STRING",
    ENRICHED: f"{_KEYED}, size STRING, city STRING, _rk STRING",
    TOTALS: "customer_id BIGINT NOT NULL, open_orders BIGINT, total_cents BIGINT, "
    "last_event_ms BIGINT",
}
KEYS = {ORDERS: "order_id", CUSTOMERS: "customer_id", ENRICHED: "order_id", TOTALS: "customer_id"}
TABLE_PROPERTIES = {
    ORDERS: {
        "bucket": "4",  # as the topic's partitions and dts's orders
        "rowkind.field": "_rk",
        "sequence.field": "_pos",
        "changelog-producer": "lookup",
    },
    CUSTOMERS: {"bucket": "1"},
    ENRICHED: {"bucket": "2", "rowkind.field": "_rk"},
    TOTALS: {
        "bucket": "2",
        "merge-engine": "aggregation",
        "fields.open_orders.aggregate-function": "sum",
        "fields.total_cents.aggregate-function": "sum",
        "fields.last_event_ms.aggregate-function": "max",
    },
}
SETTINGS = {
    "spark.sql.shuffle.partitions": "2",  # the cores
    "spark.driver.memory": DRIVER_MEMORY,  # as dts's and Delta's sides
    "spark.sql.streaming.stopTimeout": "30s",
    "spark.sql.extensions": "org.apache.paimon.spark.extensions.PaimonSparkSessionExtensions",
    "spark.sql.catalog.paimon": "org.apache.paimon.spark.SparkCatalog",
}


def table_path(warehouse: Path, table: str) -> str:
    """Where Paimon's catalog keeps ``table`` (the probe reads it there)."""
    return str(warehouse / f"{DB}.db" / table)


class PaimonPipeline:
    def __init__(self, spark: Any, ns: Any) -> None:
        self.spark = spark
        self.ns = ns
        self.warehouse = ns.work / "paimon"

    def path(self, table: str) -> str:
        return table_path(self.warehouse, table)

    def create(self) -> None:
        self.spark.sql(f"CREATE DATABASE IF NOT EXISTS paimon.{DB}")
        for table, columns in COLUMNS.items():
            # Spark's DDL has no PRIMARY KEY clause: Paimon takes the key as a property
            props = {"primary-key": KEYS[table], **TABLE_PROPERTIES[table]}
            listed = ", ".join(f"'{k}' = '{v}'" for k, v in props.items())
            self.spark.sql(f"CREATE TABLE paimon.{DB}.{table} ({columns}) TBLPROPERTIES ({listed})")

    def _kafka(self, topic: str, envelope: str) -> Any:
        return debezium_stream(self.spark, self.ns.bootstrap, topic, envelope)

    def _changelog(self) -> Any:
        """The orders' changelog as a stream: its rows with ``rowkind`` (+I, -U, +U, -D)."""
        return (
            self.spark.readStream.format("paimon")
            .option("read.changelog", "true")
            .load(self.path(ORDERS))
        )

    def _sink(self, df: Any, name: str, table: str) -> Any:
        """Paimon's streaming sink: exactly once (its commit carries the batch id)."""
        return (
            df.writeStream.format("paimon")
            .queryName(name)
            .option("checkpointLocation", str(self.ns.work / "checkpoints" / name))
            .trigger(processingTime=self.ns.trigger)
            .start(self.path(table))
        )

    def load_customers(self) -> Any:
        """The customers' stream, awaited until their snapshot is in the table."""
        source = self._kafka(self.ns.customers_topic, _CUSTOMER_ENVELOPE)
        query = self._sink(
            source.where("e.op != 'd'").select("e.after.customer_id", "e.after.city"),
            "customers", CUSTOMERS,
        )  # fmt: skip
        await_count(
            lambda: self.spark.read.format("paimon").load(self.path(CUSTOMERS)).count(),
            self.ns.customers, 300, f"{CUSTOMERS} from {self.ns.customers_topic}",
        )  # fmt: skip
        return query

    def start(self) -> list[Any]:
        return [self._orders(), self._enriched(), self._totals()]

    def _orders(self) -> Any:
        from pyspark.sql import functions as F

        op = F.col("e.op")
        image = F.when(op == "d", F.col("e.before")).otherwise(F.col("e.after"))
        kind = F.when(op == "d", "-D").when(op == "u", "+U").otherwise("+I")
        rows = self._kafka(self.ns.topic, _ENVELOPE).select(
            *[image.getField(c).alias(c) for c in _ORDER_COLUMNS],
            kind.alias("_rk"),
            F.col("offset").alias("_pos"),
        )
        return self._sink(rows, "orders", ORDERS)

    def _enriched(self) -> Any:
        return (
            self._changelog()
            .writeStream.foreachBatch(lambda batch, _: self._write_enriched(batch))
            .queryName("orders_enriched")
            .option("checkpointLocation", str(self.ns.work / "checkpoints" / "orders_enriched"))
            .trigger(processingTime=self.ns.trigger)
            .start()
        )

    def _write_enriched(self, changes: Any) -> None:
        """Each order's last change in the batch, joined, as an upsert or a delete. Ids are
        never reused, so an order deleted in the batch is deleted whatever came before;
        otherwise its last image is the one of the highest offset. Rewriting a batch after
        a crash writes the same rows: upserts and deletes are idempotent."""
        from pyspark.sql import functions as F

        last = (
            changes.where("rowkind != '-U'")
            .groupBy("order_id")
            .agg(
                F.max_by(F.struct(*_ORDER_COLUMNS[1:]), "_pos").alias("c"),
                F.max(F.col("rowkind") == "-D").alias("gone"),
            )
            .select("order_id", "c.*", "gone")
        )
        customers = self.spark.read.format("paimon").load(self.path(CUSTOMERS))
        small, large = int(self.ns.small_below), int(self.ns.large_from)
        size = (
            F.when(F.col("amount_cents") < small, "small")
            .when(F.col("amount_cents") >= large, "large")
            .otherwise("medium")
        )
        kind = F.when(F.col("gone") | (F.col("status") == "cancelled"), "-D").otherwise("+I")
        rows = last.join(F.broadcast(customers), "customer_id").select(
            *_ORDER_COLUMNS, size.alias("size"), "city", kind.alias("_rk")
        )
        rows.write.format("paimon").mode("append").save(self.path(ENRICHED))

    def _totals(self) -> Any:
        from pyspark.sql import functions as F

        sign = F.when(F.col("rowkind").isin("+I", "+U"), 1).otherwise(-1).cast("long")
        signed = (
            self._changelog()
            .where("status != 'cancelled'")
            .select(
                "customer_id",
                sign.alias("open_orders"),
                (sign * F.col("amount_cents")).alias("total_cents"),
                F.col("event_ms").alias("last_event_ms"),
            )
        )
        return self._sink(signed, "customer_totals", TOTALS)


def session(ns: Any) -> Any:
    from bench.spark_peers.common import connector_jars
    from bench.spark_peers.common import session as peer_session

    return peer_session(
        "bench-pipeline-paimon",
        ns.work / "spark",
        {
            "spark.jars": ",".join(connector_jars(Path(ns.jars))),
            "spark.sql.catalog.paimon.warehouse": str(ns.work / "paimon"),
            **SETTINGS,
        },
    )


def main() -> None:
    ns = side_args(__doc__, [
        ("--jars", "", "Paimon's Spark runtime and Spark's Kafka source (a directory)"),
        ("--small-below", "5000", "orders_enriched.size: small below this amount"),
        ("--large-from", "20000", "orders_enriched.size: large from this amount"),
    ])  # fmt: skip
    stop = stop_event()
    spark = session(ns)
    with contextlib.ExitStack() as stack, readable_errors():
        stack.callback(spark.stop)
        pipeline = PaimonPipeline(spark, ns)
        pipeline.create()
        queries = [pipeline.load_customers()]
        stack.callback(stop_queries, queries)
        queries += pipeline.start()
        (ns.work / JOB_READY).touch()
        while not stop.is_set():
            check_queries(queries)
            stop.wait(1.0)


if __name__ == "__main__":
    main()
