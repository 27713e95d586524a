"""Spark's own Kafka source on a table's topic: the changelog as typed rows with barriers.

A table's log is a Kafka topic of debezium-json records plus barrier markers. Spark's
`kafka` source (spark-sql-kafka-0-10) reads it like any topic; ``changelog_rows``
turns the records into the table's typed columns with ``_row_kind`` and ``_barrier``
and drops the markers. ``read_committed`` shows only committed barriers.

    make spark-kafka-jars                            # Spark's Kafka source, from Maven Central
    DTS_BOOTSTRAP=127.0.0.1:9092 DTS_WAREHOUSE=./warehouse python examples/spark_kafka_source.py
"""

from __future__ import annotations

from _common import BOOTSTRAP, ORDERS_SCHEMA, fresh_table, orders, spark_session

from bridge.spark.kafka_rows import changelog_rows
from bridge.tables import log_spec_for, open_log_writer
from logstore.client_config import spark_kafka_options

TABLE = "examples.kafka_orders"


def main() -> None:
    table = fresh_table(TABLE, ORDERS_SCHEMA, ["order_id"], {"bucket": "2"})
    with open_log_writer(table, BOOTSTRAP, barrier_interval_s=None) as log:
        log.write(orders([(1, 10, 500, "new"), (2, 11, 700, "new")]))
        first = log.barrier()
        log.write(orders([(2, 11, 700, "x")], kinds=["-D"]))
        second = log.barrier()
        log.write(orders([(3, 12, 900, "new")]))
        log.abort()  # never committed: a read_committed reader does not see order 3

    spark = spark_session("examples-kafka", kafka=True)
    try:
        kafka = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", BOOTSTRAP)
            .options(**spark_kafka_options())  # SASL/SSL settings from DTS_KAFKA_*, if any
            .option("subscribe", log_spec_for(table).topic)
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed")
            .option("includeHeaders", "true")
            .load()
        )
        rows = changelog_rows(kafka, table).orderBy("_barrier", "order_id").collect()
    finally:
        spark.stop()
    seen = [(r["_barrier"], r["_row_kind"], r["order_id"]) for r in rows]
    print(f"{TABLE} changelog (barrier, kind, order): {seen}")
    assert seen == [(first, "+I", 1), (first, "+I", 2), (second, "-D", 2)], seen
    print("OK: Spark's Kafka source read both committed barriers, not the aborted one")


if __name__ == "__main__":
    main()
