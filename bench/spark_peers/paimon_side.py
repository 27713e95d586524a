"""Apache Paimon's side of the Spark peers benchmark (paimon-spark-3.5 0.9.0 on PySpark
3.5.2, bench/.venv-spark-paimon; jar from `--jars`).

- write: ``CREATE TABLE paimon.b.t (...) TBLPROPERTIES ('primary-key' = 'id', 'bucket' =
  '4', 'merge-engine' = 'deduplicate')`` in a Paimon catalog, then ``INSERT INTO`` from
  the Parquet input (Paimon's defaults otherwise: auto compaction, changelog-producer
  none);
- upsert: ``INSERT INTO`` of each batch (a primary-key table upserts);
- full / filtered read: ``spark.table("paimon.b.t")``;
- changelog: the ``t$audit_log`` system table (rows with ``rowkind``) with
  ``incremental-between`` from the snapshot after the initial write to the last upsert's;
- stream: ``readStream.format("paimon")``, ``scan.mode=from-snapshot`` at the first
  snapshot after the initial write, Trigger.AvailableNow into the noop sink.
"""

from __future__ import annotations

from bench.spark_peers.common import Run, Spec, agg, args, connector_jars, session

PAIMON_VERSION = "0.9.0"
COLUMNS = "id BIGINT NOT NULL, amount DOUBLE, qty BIGINT, name STRING"
PROPS = "'primary-key' = 'id', 'bucket' = '4', 'merge-engine' = 'deduplicate'"


def main() -> None:
    ns = args(__doc__)
    spec = Spec(ns.data)
    run = Run("paimon", ns, spec)
    wh = ns.work / "wh"
    spark = session(
        "bench-peers-paimon",
        ns.work,
        {
            "spark.jars": ",".join(connector_jars(ns.jars)),
            "spark.sql.catalog.paimon": "org.apache.paimon.spark.SparkCatalog",
            "spark.sql.catalog.paimon.warehouse": f"file:{wh}",
            "spark.sql.extensions": "org.apache.paimon.spark.extensions.PaimonSparkSessionExtensions",
        },
    )
    run.versions["paimon-spark-3.5"] = PAIMON_VERSION
    spark.sql("CREATE DATABASE IF NOT EXISTS paimon.b")

    def snapshot(name: str = "t") -> int:
        row = spark.sql(f"SELECT max(snapshot_id) FROM paimon.b.`{name}$snapshots`").collect()
        return int(row[0][0])

    def create(name: str) -> None:
        spark.sql(f"CREATE TABLE paimon.b.{name} ({COLUMNS}) TBLPROPERTIES ({PROPS})")

    def insert(source: str, name: str = "t", limit: str = "") -> None:
        spark.read.parquet(source).createOrReplaceTempView("src")
        spark.sql(f"INSERT INTO paimon.b.{name} SELECT id, amount, qty, name FROM src {limit}")

    # warm-up on a throwaway table: JVM, Paimon's classes, the write and read paths
    create("warm_up")
    insert(spec.base, "warm_up", "LIMIT 1000")
    insert(spec.upsert(0), "warm_up", "LIMIT 1000")
    agg(spark.table("paimon.b.warm_up"))

    def write() -> None:
        create("t")
        insert(spec.base)

    def upsert() -> None:
        for i in range(spec.batches):
            insert(spec.upsert(i))
            run.log(f"  upsert batch {i + 1}/{spec.batches} committed (snapshot {snapshot()})")

    run.once("write", spec.rows, write)
    v0 = snapshot()
    run.once("upsert", spec.upsert_rows, upsert)
    v1 = snapshot()
    run.checks["versions"] = [v0, v1]
    kinds = spark.sql("SELECT commit_kind, count(*) FROM paimon.b.`t$snapshots` GROUP BY 1")
    run.checks["snapshot_kinds"] = {r[0]: int(r[1]) for r in kinds.collect()}
    files = spark.sql("SELECT count(*) FROM paimon.b.`t$files`").collect()[0][0]
    run.notes["layout"] = f"{files} data files at snapshot {v1}"
    lo, hi = spec.range
    run.best("full_read", spec.expected["count"], lambda: agg(spark.table("paimon.b.t")))
    run.best(
        "filtered_read",
        spec.expected["range_count"],
        lambda: agg(spark.table("paimon.b.t").where(f"id >= {lo} AND id < {hi}")),
    )
    changes = lambda: spark.read.option("incremental-between", f"{v0},{v1}").table(  # noqa: E731
        "paimon.b.`t$audit_log`"
    )
    run.changelog(changes, "rowkind")
    run.stream(
        lambda: (
            spark.readStream.format("paimon")
            .option("scan.mode", "from-snapshot")
            .option("scan.snapshot-id", str(v0 + 1))
            .load(str(wh / "b.db" / "t"))
        )
    )
    spark.stop()
    run.write()


if __name__ == "__main__":
    main()
