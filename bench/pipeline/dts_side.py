"""dts's side: two ``dts ingest`` (Debezium topics -> the orders and customers logs,
barriers every ``--barrier-interval``), ``dts worker`` (logs -> FileStore, reporting
barriers to the MetaService), two Spark streams reading orders (``tier``) into
orders_enriched (joined with customers) and customer_totals (dts sink, carrying the source
barrier), and the reader: a strong consistent read of the three tables through the
MetaService (FileStore API), beside the customers it joined.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.pipeline.model import (
    CUSTOMERS,
    DB,
    ENRICHED,
    KEYS,
    ORDERS,
    SCHEMAS,
    TABLES,
    TOTALS,
    spark_size,
)
from bench.pipeline.side import (
    DRIVER_MEMORY,
    ProbeProcess,
    announce_ready,
    await_count,
    check_queries,
    readable_errors,
    side_args,
    spark_pid,
    stop_event,
    stop_queries,
)
from bridge.demo.model import spark_totals
from bridge.demo.pipeline import await_meta, start_dts, start_meta, stop_spark
from filestore import Catalog
from filestore.format.row_kind import ROW_KIND_COLUMN
from logstore.localhost import free_port
from logstore.spec import BARRIER_COLUMN

_DERIVED = {"change-tracking": "false", "bucket": "2"}
OPTIONS = {
    ORDERS: {"bucket": "4"},
    CUSTOMERS: {"bucket": "1"},
    ENRICHED: _DERIVED,
    TOTALS: _DERIVED,
}


def create_tables(catalog: Catalog, extra: Mapping[str, str] | None = None) -> None:
    """The four tables; ``extra`` options go to every one (the soak's lifecycle settings)."""
    catalog.create_database(DB)
    for name in (*TABLES, CUSTOMERS):
        key = KEYS[name]
        options = {**OPTIONS[name], **(extra or {})}
        catalog.create_table(name, SCHEMAS[name], primary_key=[key], options=options)


def enriched(orders: Any, customers: Any) -> Any:
    """Filter + size band + the customer's city, each change keeping its row kind.

    The customers are broadcast, so the join keeps the stream's partitions as they are;
    one sink task per micro-batch, as the demo's ``spark_enriched`` (which says why)."""
    from pyspark.sql import functions as F

    city = F.broadcast(customers.select("customer_id", "city"))
    cols = [*SCHEMAS[ORDERS].names, spark_size(F).alias("size"), "city",
            ROW_KIND_COLUMN, BARRIER_COLUMN]  # fmt: skip
    return (
        orders.where(F.col("status") != "cancelled")
        .join(city, "customer_id")
        .select(*cols)
        .coalesce(1)
    )


def totals(orders: Any) -> Any:
    """The demo's per-customer totals (complete mode), with the latest change counted."""
    from pyspark.sql import functions as F

    return spark_totals(orders, F.max("event_ms").cast("long").alias("last_event_ms"))


def orders_stream(spark: Any, warehouse: str, ns: Any, consumer: str) -> Any:
    """One derived stream's read of orders. On the file tier it records its position as
    ``consumer`` (option ``consumer-id``), so expiration keeps the snapshots it has still
    to read however far it lags: one id per stream, or the faster one's position would
    stand for both."""
    reader = spark.readStream.format("dts").option("warehouse", warehouse)
    if ns.tier == "file":
        reader = reader.option("consumer-id", consumer)
    else:  # the log tier is read from Kafka
        reader = reader.option("bootstrap", ns.bootstrap)
    return reader.option("tier", ns.tier).load(ORDERS)


def start_streams(spark: Any, warehouse: str, meta_url: str, work: Path, ns: Any) -> list[Any]:
    customers = spark.read.format("dts").option("warehouse", warehouse).load(CUSTOMERS)
    queries = []
    for table, df, mode in (
        (ENRICHED, enriched(orders_stream(spark, warehouse, ns, ENRICHED), customers), "append"),
        (TOTALS, totals(orders_stream(spark, warehouse, ns, TOTALS)), "complete"),
    ):
        queries.append(
            df.writeStream.format("dts")
            .queryName(table.replace(".", "_"))
            .outputMode(mode)
            .option("warehouse", warehouse)
            .option("meta.url", meta_url)
            .option("checkpointLocation", str(work / "checkpoints" / table))
            .trigger(processingTime=ns.trigger)
            .start(table)
        )
    return queries


def main() -> None:
    ns = side_args(
        __doc__,
        extra=[
            ("--tier", "file", "dts source tier the streams read"),
            ("--barrier-interval", "1.0", "seconds per barrier of dts ingest"),
            ("--table-options", "{}", "JSON object of options every table also gets"),
            ("--meta-keep-barriers", "", "the MetaService's --keep-barriers [its default]"),
            ("--driver-java-options", "", "Spark driver's JVM options besides its -Xmx"),
        ],
    )
    stop = stop_event()
    work: Path = ns.work
    warehouse = str(work / "warehouse")
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    catalog = Catalog(warehouse)
    create_tables(catalog, json.loads(ns.table_options))
    with ExitStack() as stack, readable_errors():
        keep = int(ns.meta_keep_barriers) if ns.meta_keep_barriers else None
        meta = start_meta(warehouse, logs, keep_barriers=keep)
        stack.callback(meta.stop)
        url = await_meta(meta)
        web_port = free_port()
        worker = start_dts("worker", [
            "worker", "--warehouse", warehouse, "--bootstrap", ns.bootstrap,
            "--tables", f"{ORDERS},{CUSTOMERS}",
            "--web-port", str(web_port), "--group", "bench-pipeline-worker",
            "--meta-url", url, "--session-timeout", "6",
        ], logs)  # fmt: skip
        stack.callback(worker.stop)
        ingest = start_dts("ingest", [
            "ingest", "--from-topic", ns.topic, "--table", ORDERS, "--warehouse", warehouse,
            "--bootstrap", ns.bootstrap, "--barrier-interval", ns.barrier_interval,
        ], logs)  # fmt: skip
        stack.callback(ingest.stop)
        ingest_customers = start_dts("ingest-customers", [
            "ingest", "--from-topic", ns.customers_topic, "--table", CUSTOMERS,
            "--warehouse", warehouse, "--bootstrap", ns.bootstrap,
            "--barrier-interval", ns.barrier_interval,
        ], logs)  # fmt: skip
        stack.callback(ingest_customers.stop)
        await_count(
            lambda: catalog.get_table(CUSTOMERS).read(columns=["customer_id"]).num_rows,
            ns.customers, 120, f"{CUSTOMERS} from {ns.customers_topic}",
        )  # fmt: skip
        from bridge.spark.session import local_session

        spark = local_session(
            "bench-pipeline-dts",
            work / "spark",
            conf={
                "spark.sql.shuffle.partitions": "2",
                "spark.sql.streaming.stopTimeout": "30s",
                "spark.driver.memory": DRIVER_MEMORY,
                # Spark's launcher puts these before spark.driver.extraJavaOptions
                # (local_session's logging and Derby settings)
                **(
                    {"spark.driver.defaultJavaOptions": ns.driver_java_options}
                    if ns.driver_java_options
                    else {}
                ),
            },
        )
        stack.callback(stop_spark, spark)
        queries = start_streams(spark, warehouse, url, work, ns)
        stack.callback(stop_queries, queries)
        stack.callback(_save_progress, queries, logs)

        probe = ProbeProcess(
            "bench.pipeline.dts_probe", ns, ["--warehouse", warehouse, "--meta-url", url]
        )
        stack.callback(probe.stop)
        announce_ready(work, {"spark": spark_pid(), "metaservice": meta.pid,
                              "worker": worker.pid, "ingest": ingest.pid,
                              "ingest-customers": ingest_customers.pid,
                              "probe": probe.pid},
                       {"worker": f"http://127.0.0.1:{web_port}"})  # fmt: skip
        while not stop.is_set():
            for svc in (meta, worker, ingest, ingest_customers, probe):
                svc.check()
            check_queries(queries)
            stop.wait(1.0)


def _save_progress(queries: list[Any], logs: Path) -> None:
    """Each stream's recent micro-batches (Spark's durations per phase): the profile of
    the hop from a source snapshot to a derived one."""
    for q in queries:
        with contextlib.suppress(Exception), open(logs / f"progress-{q.name}.jsonl", "w") as f:
            for progress in q.recentProgress:
                f.write(" ".join(str(progress.json).split()) + "\n")  # one line per batch


if __name__ == "__main__":
    main()
