"""format("dts") on Spark needs only `dynamic-table-storage[spark]` (issue 26).

The wheel pip builds runs in an interpreter that has only the distributions the base and
the `spark` extra declare, recursively (and PySpark, which a cluster provides: the
`pyspark` extra), and refuses, naming the importer, every other one installed here: the
driver script and every Python process Spark starts with it, workers and planners alike
(tests/bridge/spark/import_guard.py). Through a local Spark with
the dts extension: a primary-key CTAS, an upsert, reads by name, by `dts.table` and by
format("dts"), a file-tier stream into a derived table, and a consistent read of the two
without the MetaService. A module-level import of the MetaService's client or models on
that path (httpx, pydantic) makes it fail.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bridge.spark.cluster import SPARK_HOME
from tests.bridge.spark.import_guard import GuardedPython, guarded_python
from tests.module_imports import ROOT
from tests.wheel_build import build_wheel, unpacked

SPARK_EXTRAS = ("spark", "pyspark")

JOB = """
import sys
from pathlib import Path

import bridge as dts
from bridge.spark.native.extension import extension_loaded
from bridge.spark.session import local_session

work, warehouse, code = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
assert dts.__file__.startswith(code), dts.__file__  # the wheel's code, not the checkout's
spark = local_session("dts-spark-extra", work)  # loads the dts extension (make spark-ext)
assert extension_loaded(spark), "no dts extension jar: make spark-ext"
dts.register(spark, warehouse=warehouse)


def probe(_):
    try:
        import pydantic  # noqa: F401
    except ImportError as e:
        return str(e)
    return "imported"


(answer,) = spark.sparkContext.parallelize([0], 1).map(probe).collect()
assert answer.startswith("import guard"), answer  # the executors' Python refuses it too

cols = "id long, v string"
rows = spark.createDataFrame([(i, f"v{i}") for i in range(100)], cols).repartition(2)
dts.create_table_as(spark, "db.items", rows, primary_key=["id"], options={"bucket": "2"})
upsert = spark.createDataFrame([(i, "updated") for i in range(0, 100, 10)], cols)
upsert.write.format("dts").option("barrier", "1000").mode("append").save("db.items")

assert spark.table("db.items").count() == 100  # by name: the extension's native plan
assert spark.table("db.items").where("v = 'updated'").count() == 10
assert dts.table(spark, "db.items").where("v = 'updated'").count() == 10
assert spark.read.format("dts").load("db.items").where("v = 'v1'").count() == 1

dts.create_table_as(spark, "db.updated", rows.limit(0), primary_key=["id"])
query = (
    spark.readStream.format("dts").option("tier", "file").load("db.items")
    .where("v = 'updated'")
    .writeStream.format("dts")
    .option("checkpointLocation", str(work / "checkpoint"))
    .trigger(availableNow=True)
    .start("db.updated")
)
query.awaitTermination(300)
assert query.exception() is None, query.exception()

frames = dts.consistent_read(spark, ["db.items", "db.updated"], warehouse=warehouse)
assert frames.version.barrier == 1000, frames.version
assert frames["db.updated"].count() == 10
loaded = {"pydantic", "httpx", "fastapi", "sqlalchemy", "faust"} & set(sys.modules)
assert not loaded, loaded
spark.stop()
print("OK: CTAS, upsert, reads by name, dts.table, a file-tier stream, a consistent read")
"""


@pytest.fixture(scope="module")
def wheel_code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    return unpacked(build_wheel(work), work / "code")


def _env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    }
    return {**env, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[GuardedPython]:
    yield guarded_python(tmp_path / "python", ROOT, SPARK_EXTRAS)


def test_the_guard_refuses_an_import_the_extras_do_not_declare(guarded: GuardedPython) -> None:
    """The guard itself: the data source's modules import, the MetaService client does not."""
    code = "import bridge.spark.registration, bridge.consistency_read\nimport bridge.meta.client\n"
    proc = subprocess.run(
        [guarded.python, "-c", code], env=_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0
    assert "import guard: bridge.meta.client imports httpx" in proc.stderr, proc.stderr[-3000:]
    assert ("httpx", "bridge.meta.client", "httpx") in guarded.refused()
    assert {"pydantic", "fastapi", "uvicorn", "faust", "click"} <= guarded.blocked.keys()
    assert not {"pyarrow", "confluent_kafka", "pyspark", "py4j"} & guarded.blocked.keys()


@pytest.mark.spark
@pytest.mark.slow
def test_format_dts_runs_on_the_wheel_with_only_the_spark_extra(
    tmp_path: Path, wheel_code: Path
) -> None:
    guarded = guarded_python(tmp_path / "python", wheel_code, SPARK_EXTRAS)
    script = tmp_path / "job.py"
    script.write_text(JOB)
    work, warehouse = tmp_path / "work", tmp_path / "warehouse"
    warehouse.mkdir()
    cmd = [guarded.python, str(script), str(work), str(warehouse), str(wheel_code)]
    env = {**_env(), "PYSPARK_PYTHON": guarded.python, "PYSPARK_DRIVER_PYTHON": guarded.python}
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    refused = "\n".join(map(str, guarded.refused()))
    assert proc.returncode == 0 and "OK:" in proc.stdout, f"{out[-6000:]}\nrefused:\n{refused}"
    # the guard ran where the data source runs: the driver (which also plans reads by name
    # and file-tier streams for the extension), the executors' Python workers (read and
    # write tasks), and the workers that plan batch reads and commit writes and micro-batches
    commands = "\n".join(guarded.processes())
    for where in (
        str(script),
        "pyspark.daemon pyspark.worker",
        "pyspark.sql.worker.plan_data_source_read",
        "pyspark.sql.worker.write_into_data_source",
        "pyspark.sql.worker.commit_data_source_write",
        "pyspark.sql.worker.python_streaming_sink_runner",
    ):
        assert where in commands, f"no guarded process ran {where}:\n{commands}"
