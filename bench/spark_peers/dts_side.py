"""dts's side of the Spark peers benchmark (PySpark 4.2, the project's .venv).

- write: ``df.write.format("dts")`` with ``create``, ``primary-key=id``, ``table.bucket=4``,
  ``table.deletion-vectors.enabled=true`` (a primary-key table, deduplicate merge engine,
  merge-on-write: upserts mark the rows they replace, so reads merge nothing; the default
  options otherwise);
- upsert: the same writer in append mode (rows without ``_row_kind`` are upserts);
- full / filtered read: ``dts.table(spark, ...)`` (Spark's Parquet reader for splits that
  need no merge, the Python source with merge-on-read for the others) and, for reference,
  the Python source alone (``spark.read.format("dts")``);
- changelog: ``option("changes", "v0,v1")`` between the snapshot after the initial write
  and the last upsert's;
- stream: ``readStream.format("dts")``, ``tier=file``, ``scan.mode=from-snapshot`` at the
  first snapshot after the initial write, Trigger.AvailableNow into the noop sink;
- log stream (dts only: the peers have no log tier): the first upsert batch written to
  a log-tier table's topic (an embedded Kafka broker on 127.0.0.1, one barrier per
  100k rows), then streamed with Trigger.AvailableNow into the noop sink twice, same
  topic, same records: ``readStream.format("dts")`` with ``tier=log``, and Spark's own
  Kafka source with the project's ``changelog_rows()`` parsing (``barrier=False``: a
  stream cannot window the markers; dts's rows also carry ``_barrier``).
"""

from __future__ import annotations

import subprocess
from typing import Any

from bench.spark_peers.common import Run, Spec, agg, args, session
from bridge.spark.session import spark_kafka_jars

TABLE = "b.t"


def main() -> None:
    ns = args(__doc__)
    spec = Spec(ns.data)
    run = Run("dts", ns, spec)
    import bridge as dts
    from filestore import Catalog

    wh = str(ns.work / "wh")
    Catalog(wh).create_database("b")
    # with the dts Spark extension, as Delta's side loads Delta's (column pruning of the
    # Python source's merge reads, reads by name at native speed)
    conf = {"spark.dts.warehouse": wh, **dts.extension_conf()}
    # Spark's own Kafka source too, for the log-tier phase's comparison
    conf["spark.jars"] = ",".join([conf["spark.jars"], *spark_kafka_jars()])
    spark = session("bench-peers-dts", ns.work, conf)
    dts.register(spark)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    run.versions["dts"] = f"commit {head.stdout.strip()}" if head.returncode == 0 else "?"

    def snapshot() -> int:
        snap = Catalog(wh).get_table(TABLE).latest_snapshot()
        assert snap is not None
        return int(snap.id)

    def writer(df: Any) -> Any:
        return df.write.format("dts").option("warehouse", wh).mode("append")

    def write() -> None:
        w = writer(spark.read.parquet(spec.base)).option("create", "true")
        w = w.option("primary-key", "id").option("table.bucket", "4")
        w.option("table.deletion-vectors.enabled", "true").save(TABLE)

    def upsert() -> None:
        for i in range(spec.batches):
            writer(spark.read.parquet(spec.upsert(i))).save(TABLE)
            run.log(f"  upsert batch {i + 1}/{spec.batches} committed (snapshot {snapshot()})")

    # warm-up on a throwaway table: JVM, Python workers, the write and read paths

    def warm() -> Any:
        return spark.read.parquet(spec.base).limit(1000)

    w = writer(warm()).option("create", "true").option("primary-key", "id")
    w.option("table.bucket", "4").save("b.warm_up")
    writer(warm()).save("b.warm_up")
    agg(dts.table(spark, "b.warm_up"))

    run.once("write", spec.rows, write)
    v0 = snapshot()
    run.once("upsert", spec.upsert_rows, upsert)
    v1 = snapshot()
    run.checks["versions"] = [v0, v1]
    table = Catalog(wh).get_table(TABLE)
    splits = table.new_scan().plan()
    run.notes["layout"] = (
        f"{len(splits)} splits, {sum(len(s.files) for s in splits)} data files at snapshot {v1}"
    )
    total = spec.expected["count"]
    lo, hi = spec.range
    in_range = spec.expected["range_count"]
    run.best("full_read", total, lambda: agg(dts.table(spark, TABLE)))
    run.best(
        "filtered_read",
        in_range,
        lambda: agg(dts.table(spark, TABLE).where(f"id >= {lo} AND id < {hi}")),
    )

    def source() -> Any:
        return spark.read.format("dts").option("warehouse", wh).load(TABLE)

    run.best("full_read_python_source", total, lambda: agg(source()))

    def changes() -> Any:
        reader = spark.read.format("dts").option("warehouse", wh)
        return reader.option("changes", f"{v0},{v1}").load(TABLE)

    run.changelog(changes, "_row_kind")
    run.stream(
        lambda: (
            spark.readStream.format("dts")
            .option("warehouse", wh)
            .option("tier", "file")
            .option("scan.mode", "from-snapshot")
            .option("scan.snapshot-id", str(v0 + 1))
            .load(TABLE)
        )
    )
    log_stream(spark, run, spec, wh)
    spark.stop()
    run.write()


LOG_TABLE = "b.log"
LOG_BARRIER_ROWS = 100_000


def log_stream(spark: Any, run: Run, spec: Spec, wh: str) -> None:
    """The log-tier phases: dts's `tier=log` source beside Spark's Kafka source."""
    import pyarrow.parquet as pq

    from bridge.spark.kafka_rows import changelog_rows, kafka_source_options
    from bridge.tables import log_spec_for, open_log_writer
    from filestore import Catalog
    from logstore.broker import EmbeddedBroker

    data = pq.read_table(spec.upsert(0))
    table = Catalog(wh).create_table(LOG_TABLE, data.schema, primary_key=["id"],
                                     options={"bucket": "4"})  # fmt: skip
    with EmbeddedBroker() as broker:
        run.log(f"log stream: broker on {broker.bootstrap}, writing {data.num_rows:,} records")
        writer = open_log_writer(table, broker.bootstrap, barrier_interval_s=None)
        for batch in data.to_batches(max_chunksize=LOG_BARRIER_ROWS):
            writer.write(batch)
            writer.barrier()
        writer.close(final_barrier=False)
        topic = log_spec_for(table).topic

        def dts_log() -> Any:
            reader = spark.readStream.format("dts").option("warehouse", wh)
            reader = reader.option("tier", "log").option("bootstrap", broker.bootstrap)
            # the upserts as stored, as changelog_rows gives them on Spark's Kafka source
            # (the default, a full changelog, also looks old rows up: another job)
            reader = reader.option("log.normalize", "false")
            return reader.option("scan.mode", "latest-full").load(LOG_TABLE)

        def kafka_log() -> Any:
            # committed records only, as dts reads them (markers come too: Spark counts
            # them as input rows; changelog_rows drops them)
            options = kafka_source_options(broker.bootstrap, topic)
            reader = spark.readStream.format("kafka").options(**options)
            return changelog_rows(reader.load(), table, barrier=False)

        run.stream_phase("log_stream", data.num_rows, dts_log)
        run.stream_phase("log_stream_kafka", data.num_rows, kafka_log)


if __name__ == "__main__":
    main()
