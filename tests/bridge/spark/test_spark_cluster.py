"""dts on a Spark standalone cluster (issue 26): a master and two workers on loopback,
executors in their own JVMs whose Python has the dependencies but not the project, which
reaches them only as docs/deploy.md ships it (a zip via --py-files/spark.submit.pyFiles).

Through it, with `spark-submit` (an example: file-tier streams into derived tables
carrying barriers, a consistent read) and with one session built in Python (primary-key
writes and upserts, reads by name and by `dts.table` as native scans, an atomic CTAS
whose executor task fails, then a log-tier stream its executors read from a broker into a
dts table: one application, so its executors start once).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.spark.native.extension import extension_conf
from tests.bridge.spark.cluster import ROOT, SparkCluster, spark_cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with spark_cluster(tmp_path_factory.mktemp("spark-cluster")) as c:
        yield c


def _confs(cluster: SparkCluster, warehouse: Path) -> dict[str, str]:
    return {
        "spark.pyspark.python": cluster.python,
        "spark.driver.host": "127.0.0.1",  # loopback only: executors call the driver back
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.memory": "512m",
        "spark.cores.max": "2",
        "spark.sql.shuffle.partitions": "2",
        "spark.executorEnv.DTS_WAREHOUSE": str(warehouse),
        **extension_conf(),
    }


def _run(cmd: list[str], env: dict[str, str], cluster: SparkCluster) -> str:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{out[-6000:]}\n{cluster.log_tail(lines=5)}"
    return proc.stdout


def _executors_launched(cluster: SparkCluster) -> int:
    return sum(
        (cluster.logs / f"worker-{i}.log").read_text().count("Asked to launch executor")
        for i in range(2)
    )


def test_spark_submit_runs_the_examples_with_the_package_shipped(
    cluster: SparkCluster, tmp_path: Path
) -> None:
    warehouse = tmp_path / "warehouse"
    env = {**os.environ, "DTS_WAREHOUSE": str(warehouse), "PYSPARK_PYTHON": cluster.python}
    env["PYSPARK_DRIVER_PYTHON"] = cluster.python  # the driver too sees only the zip
    env.pop("PYTHONPATH", None)
    before = _executors_launched(cluster)
    submit = [str(Path(sys.executable).with_name("spark-submit")), "--master", cluster.master_url]
    submit += ["--py-files", cluster.package_zip]
    for key, value in _confs(cluster, warehouse).items():
        submit += ["--conf", f"{key}={value}"]
    # a source table written in Python, two streaming jobs deriving tables from its file
    # tier with its barriers, and a consistent read of the three (the example checks)
    out = _run([*submit, str(ROOT / "examples" / "streaming_derived.py")], env, cluster)
    assert out.strip().splitlines()[-1].startswith("OK:"), out[-2000:]
    assert _executors_launched(cluster) >= before + 1  # the job ran on the workers


# a session on the cluster: argv is master, package zip, warehouse, the script's own
# arguments, then the session's confs (key=value)
SESSION_HEAD = """
import sys
from pyspark.sql import SparkSession
import bridge as dts

given = sys.argv[1:]
confs = dict(arg.split("=", 1) for arg in given if "=" in arg)
master, zip_path, warehouse, *args = [arg for arg in given if "=" not in arg]
builder = SparkSession.builder.master(master).appName("dts-cluster-session")
builder = builder.config("spark.submit.pyFiles", zip_path)
for key, value in confs.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
dts.register(spark, warehouse=warehouse)
"""

SESSION_SCRIPT = (
    SESSION_HEAD
    + """
import pyarrow as pa
from pyspark.sql import functions as F
from filestore import Catalog

schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
Catalog(warehouse).create_table("db.items", schema, primary_key=["id"], options={"bucket": "2"})
rows = spark.range(0, 1000).selectExpr("id", "concat('v', id) as v").repartition(2)
rows.write.format("dts").mode("append").save("db.items")
upsert = spark.range(0, 1000, 10).selectExpr("id", "'updated' as v").repartition(2)
upsert.write.format("dts").mode("append").save("db.items")
dts.refresh(spark)

by_name = spark.table("db.items")
assert by_name.count() == 1000, by_name.count()
assert by_name.where("v = 'updated'").count() == 100
compacted = dts.table(spark, "db.items")
assert compacted.where("v = 'updated'").count() == 100
Catalog(warehouse).get_table("db.items").compact(full=True)
plan = dts.table(spark, "db.items")._jdf.queryExecution().executedPlan().toString()
assert "FileScan parquet" in plan, plan
assert dts.table(spark, "db.items").count() == 1000

@F.udf("string")
def boom(v):
    if v.endswith("7"):
        raise ValueError("ctas task failure on purpose")
    return v

failing = spark.range(0, 100).selectExpr("id", "concat('v', id) as v").withColumn("v", boom("v"))
try:
    dts.create_table_as(spark, "db.gone", failing.repartition(2), warehouse=warehouse,
                        primary_key=["id"])
    raise AssertionError("the CTAS should have failed")
except Exception as exc:
    assert "ctas task failure on purpose" in str(exc), exc
assert not Catalog(warehouse).table_exists("db.gone")
print("OK: a Python session on the cluster wrote, upserted, read natively and kept a failed CTAS invisible")
"""
)


def _run_session(cluster: SparkCluster, tmp_path: Path, script: str, *args: str) -> str:
    """Run ``script`` (SESSION_HEAD and its own part) as a Python-built session on the
    cluster with a warehouse under ``tmp_path``; its stdout."""
    warehouse = tmp_path / "warehouse"
    path = tmp_path / "session.py"
    path.write_text(textwrap.dedent(script))
    confs = [f"{k}={v}" for k, v in _confs(cluster, warehouse).items()]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # a session built in Python takes its workers' interpreter from PYSPARK_PYTHON (the
    # driver's own Python, with the project installed, plans; executors get the zip)
    env["PYSPARK_PYTHON"] = cluster.python
    cmd = [sys.executable, str(path), cluster.master_url, cluster.package_zip, str(warehouse)]
    return _run([*cmd, *args, *confs], env, cluster)


# the same driver goes on (one application: its executors started once) to a log-tier stream
LOG_TIER_SCRIPT = (
    SESSION_SCRIPT
    + """
from bridge.tables import open_log_writer

bootstrap, checkpoint = args

schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
catalog = Catalog(warehouse)
catalog.create_database("logs")
source = catalog.create_table("logs.events", schema, primary_key=["id"],
                              options={"bucket": "2", "log.topic": "dts-cluster-events"})
target = catalog.create_table("logs.events_copy", schema, primary_key=["id"],
                              options={"bucket": "2"})
with open_log_writer(source, bootstrap, barrier_interval_s=None) as log:
    log.write(pa.table({"id": list(range(300)), "v": [f"v{i}" for i in range(300)]}, schema=schema))
    log.barrier(1000)
    log.write(pa.table({"id": list(range(0, 300, 3)), "v": ["u"] * 100}, schema=schema))
    log.barrier(2000)

query = (
    spark.readStream.format("dts").option("tier", "log").option("bootstrap", bootstrap)
    .load("logs.events")
    .writeStream.format("dts").option("checkpointLocation", checkpoint)
    .trigger(availableNow=True).start("logs.events_copy")
)
assert query.awaitTermination(300)
assert query.exception() is None, query.exception()
copy = target.read()
assert copy.num_rows == 300, copy.num_rows
assert sorted(copy.column("v").to_pylist()).count("u") == 100
assert target.latest_snapshot().barrier == 2000, target.latest_snapshot()
print("OK: a log-tier stream on the cluster copied every barrier, ending at barrier 2000")
spark.stop()
"""
)


def test_a_session_built_in_python_on_the_cluster(  # type: ignore[no-untyped-def]
    cluster: SparkCluster, broker, tmp_path: Path
) -> None:
    """One Python-built session: primary-key writes, upserts, native reads and a failed
    CTAS; then the log tier read by the executors (Kafka from their Python workers) into
    a dts table: every row, and the source's last barrier carried."""
    before = _executors_launched(cluster)
    out = _run_session(cluster, tmp_path, LOG_TIER_SCRIPT, broker.bootstrap, str(tmp_path / "ck"))
    assert "OK: a Python session on the cluster" in out, out[-2000:]
    assert "OK: a log-tier stream on the cluster" in out, out[-2000:]
    assert _executors_launched(cluster) >= before + 1  # the job ran on the workers
