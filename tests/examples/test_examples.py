"""Every script in examples/ runs as a user runs it (a subprocess, its own Spark) against the
embedded Apache Kafka broker and a fresh warehouse, and ends with its ``OK:`` line.

Two run on a standalone Spark cluster instead, through ``spark-submit`` as docs/deploy.md
ships the project (``RUN_ON_A_CLUSTER``): the same script and its checks, on executors that
have only the zip. Running them here too cost the suite two more Spark sessions (~140 s of
test time with the other core busy) and showed nothing the cluster run does not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from logstore.broker import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("[!_]*.py"))
SPARK = {"spark_kafka_source.py"}
#: example -> the file whose test runs it with spark-submit on a standalone cluster
RUN_ON_A_CLUSTER = {
    "batch_snapshots.py": "docs/deploy.md",
    "streaming_derived.py": "tests/bridge/spark/test_spark_cluster.py",
}


def test_the_examples_are_the_main_jobs() -> None:
    assert EXAMPLES == [
        "batch_snapshots.py",
        "cdc_to_table.py",
        "debezium_ingest.py",
        "spark_kafka_source.py",
        "streaming_derived.py",
    ]


def test_the_examples_not_run_here_run_on_the_cluster() -> None:
    """What makes the cluster runs those of the example: deploy.md's block that sets
    SPARK_MASTER submits it (the docs test runs it on its cluster, and a failed check
    fails the submit), and the cluster test submits the other and checks its OK line."""
    deploy_blocks = (ROOT / "docs" / "deploy.md").read_text().split("```")
    assert any(
        "spark-submit" in b and "SPARK_MASTER" in b and "examples/batch_snapshots.py" in b
        for b in deploy_blocks
    )
    cluster_test = (ROOT / RUN_ON_A_CLUSTER["streaming_derived.py"]).read_text()
    assert '"examples" / "streaming_derived.py"' in cluster_test
    assert set(RUN_ON_A_CLUSTER) < set(EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("script", [e for e in EXAMPLES if e not in RUN_ON_A_CLUSTER])
def test_example_runs(script: str, broker: EmbeddedBroker, tmp_path: Path) -> None:
    if script == "spark_kafka_source.py":
        from bridge.spark.session import spark_kafka_available

        if not spark_kafka_available():
            pytest.skip("Spark's Kafka source jars are not cached: make spark-kafka-jars")
    if script in SPARK:
        pytest.importorskip("pyspark")
    env = {
        **os.environ,
        "DTS_BOOTSTRAP": broker.bootstrap,
        "DTS_WAREHOUSE": str(tmp_path / "warehouse"),
        "PYSPARK_PYTHON": sys.executable,
        "TMPDIR": str(tmp_path),
    }
    env.pop("DTS_META_URL", None)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("OK: "), out[-3000:]


def test_compose_runs_the_examples_it_mounts() -> None:
    """`docker compose exec spark python examples/<example>.py` finds real scripts."""
    import yaml

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    spark = compose["services"]["spark"]
    mounts = [v for v in spark["volumes"] if isinstance(v, str) and v.startswith("./examples:")]
    assert mounts == ["./examples:/opt/dts/examples:ro"]
    assert "WORKDIR /opt/dts" in (ROOT / "Dockerfile").read_text()
    assert compose["x-dts"]["environment"]["DTS_LOG_LEVEL"]  # read by every dts command
    assert len(EXAMPLES) >= 4 and (ROOT / "examples" / "_common.py").exists()
