"""dts's side: ``dts ingest`` (Debezium topic -> the orders log, barriers every
``--barrier-interval``), ``dts worker`` (log -> FileStore, reporting barriers to the
MetaService), two Spark streams reading orders (``tier``) into orders_enriched and
customer_totals (dts sink, carrying the source barrier), and the reader: a strong
consistent read of the three tables through the MetaService (FileStore API).
"""

from __future__ import annotations

import contextlib
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.pipeline.model import (
    DB,
    ENRICHED,
    EVENT_COLUMN,
    ORDERS,
    SCHEMAS,
    TABLES,
    TOTALS,
    latest_events,
    spark_size,
)
from bench.pipeline.probe import Sampler
from bench.pipeline.side import SAMPLES, announce_ready, side_args, spark_pid, stop_event
from bridge.consistency_read import consistent_read_tables
from bridge.demo.model import spark_totals
from bridge.demo.pipeline import await_meta, start_dts, start_meta, stop_spark
from filestore import Catalog
from filestore.row_kind import ROW_KIND_COLUMN
from logstore.localhost import free_port
from logstore.spec import BARRIER_COLUMN

_DERIVED = {"change-tracking": "false", "bucket": "2"}
OPTIONS = {ORDERS: {"bucket": "4"}, ENRICHED: _DERIVED, TOTALS: _DERIVED}


def create_tables(catalog: Catalog) -> None:
    catalog.create_database(DB)
    for name in TABLES:
        key = "customer_id" if name == TOTALS else "order_id"
        catalog.create_table(name, SCHEMAS[name], primary_key=[key], options=OPTIONS[name])


def enriched(orders: Any) -> Any:
    """Filter + size band, each change keeping its row kind; one task so every key's
    changes reach the sink in order (as the demo's ``spark_enriched``)."""
    from pyspark.sql import functions as F

    cols = [*SCHEMAS[ORDERS].names, spark_size(F).alias("size"), ROW_KIND_COLUMN, BARRIER_COLUMN]
    return orders.where(F.col("status") != "cancelled").select(*cols).coalesce(1)


def totals(orders: Any) -> Any:
    """The demo's per-customer totals (complete mode), with the latest change counted."""
    from pyspark.sql import functions as F

    return spark_totals(orders, F.max("event_ms").cast("long").alias("last_event_ms"))


def start_streams(spark: Any, warehouse: str, meta_url: str, work: Path, ns: Any) -> list[Any]:
    source = (
        spark.readStream.format("dts")
        .option("warehouse", warehouse)
        .option("tier", ns.tier)
        .load(ORDERS)
    )
    queries = []
    for table, transform, mode in ((ENRICHED, enriched, "append"), (TOTALS, totals, "complete")):
        queries.append(
            transform(source)
            .writeStream.format("dts")
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
        ],
    )
    stop = stop_event()
    work: Path = ns.work
    warehouse = str(work / "warehouse")
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    catalog = Catalog(warehouse)
    create_tables(catalog)
    with ExitStack() as stack:
        meta = start_meta(warehouse, logs)
        stack.callback(meta.stop)
        url = await_meta(meta)
        worker = start_dts("worker", [
            "worker", "--warehouse", warehouse, "--bootstrap", ns.bootstrap, "--tables", ORDERS,
            "--web-port", str(free_port()), "--group", "bench-pipeline-worker",
            "--meta-url", url, "--session-timeout", "6",
        ], logs)  # fmt: skip
        stack.callback(worker.stop)
        ingest = start_dts("ingest", [
            "ingest", "--from-topic", ns.topic, "--table", ORDERS, "--warehouse", warehouse,
            "--bootstrap", ns.bootstrap, "--barrier-interval", ns.barrier_interval,
        ], logs)  # fmt: skip
        stack.callback(ingest.stop)
        from bridge.spark.session import local_session

        spark = local_session(
            "bench-pipeline-dts",
            work / "spark",
            conf={"spark.sql.shuffle.partitions": "2", "spark.sql.streaming.stopTimeout": "30s"},
        )
        stack.callback(stop_spark, spark)
        queries = start_streams(spark, warehouse, url, work, ns)
        stack.callback(_stop_queries, queries)
        stack.callback(_save_progress, queries, logs)

        def fresh() -> dict[str, int | None]:
            """Each table at its latest snapshot: the newest change it shows."""
            return latest_events(
                {t: catalog.get_table(t).read(columns=[EVENT_COLUMN[t]]) for t in TABLES}
            )

        def together() -> tuple[dict[str, Any], dict[str, Any]]:
            """The three at the one barrier the MetaService gives for a strong read."""
            tables = consistent_read_tables(catalog, list(TABLES), meta_url=url, mode="strong")
            return dict(tables), {"barrier": tables.version.barrier}

        sampler = Sampler(fresh, together, work / SAMPLES, ns.probe_interval).start()
        stack.callback(sampler.stop)
        announce_ready(work, {"spark": spark_pid(), "metaservice": meta.pid,
                              "worker": worker.pid, "ingest": ingest.pid})  # fmt: skip
        while not stop.is_set():
            for svc in (meta, worker, ingest):
                svc.check()
            for q in queries:
                if q.exception() is not None:
                    raise RuntimeError(f"stream {q.name} failed: {q.exception()}")
            stop.wait(1.0)


def _save_progress(queries: list[Any], logs: Path) -> None:
    """Each stream's recent micro-batches (Spark's durations per phase): the profile of
    the hop from a source snapshot to a derived one."""
    for q in queries:
        with contextlib.suppress(Exception), open(logs / f"progress-{q.name}.jsonl", "w") as f:
            for progress in q.recentProgress:
                f.write(" ".join(str(progress.json).split()) + "\n")  # one line per batch


def _stop_queries(queries: list[Any]) -> None:
    for q in queries:
        with contextlib.suppress(Exception):
            q.stop()


if __name__ == "__main__":
    main()
