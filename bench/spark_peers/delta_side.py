"""Delta Lake's side of the Spark peers benchmark (delta-spark 4.4.0 on PySpark 4.2, the
project's .venv; jars from `--jars`).

- write: ``CREATE TABLE delta.`path` ... TBLPROPERTIES (delta.enableChangeDataFeed = true)``
  (the change feed must be on for the changelog phases), then ``df.write.format("delta")``
  in append mode. Delta has no buckets: the table is unpartitioned, Delta's defaults
  otherwise (no deletion vectors: MERGE rewrites the files it touches);
- upsert: ``MERGE INTO ... ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED
  THEN INSERT *``, one MERGE per batch;
- full / filtered read: ``spark.read.format("delta").load(path)``;
- changelog: the change feed (``readChangeFeed``) from the version after the initial write
  to the last MERGE's (versions inclusive);
- stream: ``readStream.format("delta")`` with ``readChangeFeed`` from the same version,
  Trigger.AvailableNow into the noop sink (Delta's plain streaming source refuses MERGE
  commits unless told to skip them or to re-emit whole rewritten files; the change feed is
  what streams the changes of new commits).
"""

from __future__ import annotations

from typing import Any

from bench.spark_peers.common import Run, Spec, agg, args, connector_jars, session

DELTA_VERSION = "4.4.0"
COLUMNS = "id BIGINT, amount DOUBLE, qty BIGINT, name STRING"


def main() -> None:
    ns = args(__doc__)
    spec = Spec(ns.data)
    run = Run("delta", ns, spec)
    spark = session(
        "bench-peers-delta",
        ns.work,
        {
            "spark.jars": ",".join(connector_jars(ns.jars)),
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        },
    )
    run.versions["delta-spark"] = DELTA_VERSION
    path = str(ns.work / "t")
    ref = f"delta.`{path}`"

    def version(where: str = ref) -> int:
        return int(spark.sql(f"DESCRIBE HISTORY {where} LIMIT 1").collect()[0]["version"])

    def create(where: str) -> None:
        spark.sql(
            f"CREATE TABLE {where} ({COLUMNS}) USING delta "
            "TBLPROPERTIES (delta.enableChangeDataFeed = true)"
        )

    def merge(df: Any, where: str = ref) -> None:
        df.createOrReplaceTempView("src")
        spark.sql(
            f"MERGE INTO {where} t USING src s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )

    # warm-up on a throwaway table: JVM, Delta's classes, MERGE's code paths
    scratch = f"delta.`{ns.work / 'warm-up'}`"
    create(scratch)
    spark.read.parquet(spec.base).limit(1000).write.format("delta").mode("append").save(
        str(ns.work / "warm-up")
    )
    merge(spark.read.parquet(spec.upsert(0)).limit(1000), scratch)
    agg(spark.read.format("delta").load(str(ns.work / "warm-up")))

    def write() -> None:
        create(ref)
        spark.read.parquet(spec.base).write.format("delta").mode("append").save(path)

    def upsert() -> None:
        for i in range(spec.batches):
            merge(spark.read.parquet(spec.upsert(i)))
            run.log(f"  upsert batch {i + 1}/{spec.batches} committed (version {version()})")

    run.once("write", spec.rows, write)
    v0 = version()
    run.once("upsert", spec.upsert_rows, upsert)
    v1 = version()
    run.checks["versions"] = [v0, v1]
    detail = spark.sql(f"DESCRIBE DETAIL {ref}").collect()[0]
    run.notes["layout"] = f"{detail['numFiles']} data files at version {v1}"
    lo, hi = spec.range

    def table() -> Any:
        return spark.read.format("delta").load(path)

    run.best("full_read", spec.expected["count"], lambda: agg(table()))
    run.best(
        "filtered_read",
        spec.expected["range_count"],
        lambda: agg(table().where(f"id >= {lo} AND id < {hi}")),
    )

    def changes() -> Any:
        return (
            spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", str(v0 + 1))
            .option("endingVersion", str(v1))
            .load(path)
        )

    run.changelog(changes, "_change_type")
    run.stream(
        lambda: (
            spark.readStream.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", str(v0 + 1))
            .load(path)
        )
    )
    spark.stop()
    run.write()


if __name__ == "__main__":
    main()
