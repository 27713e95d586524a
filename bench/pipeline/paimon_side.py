"""The stitched side's Paimon variant (issue #42, item 4): Paimon's Spark runtime runs on
the Spark it is built for (3.5), so its job (``paimon_job``) runs in the Paimon virtual
environment of bench/spark_peers; this side, in the project's, starts it, waits for its
streams, and reads its tables in a process of its own with pypaimon-rust
(``paimon_probe``), as the other sides read theirs.

``set_up`` makes the environment, resolves the jars into the jar cache and installs
pypaimon-rust there: once, on the driver's first use.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from bench.pipeline.paimon_job import JOB_READY
from bench.pipeline.readers_apart import PAIMON_RS
from bench.pipeline.side import (
    ChildProcess,
    ProbeProcess,
    announce_ready,
    readable_errors,
    side_args,
    stop_event,
)
from bench.spark_peers.__main__ import ROOT, make_paimon_venv, python_for, resolve_jars
from bridge.demo.model import LARGE_FROM, SMALL_BELOW
from logstore.localhost import cache_dir

HERE = Path(__file__).resolve().parent
JARS = cache_dir() / "pipeline-paimon-0.9.0"
START_TIMEOUT_S = 300.0


def set_up() -> None:
    make_paimon_venv()
    resolve_jars(HERE / "paimon.pom.xml", JARS, [], "Paimon's Spark runtime and Kafka source")
    PAIMON_RS.ensure()


class Job(ChildProcess):
    """The Spark job in the Paimon environment: started, awaited, stopped by PID."""

    def __init__(self, argv: list[str], work: Path) -> None:
        self.work = work
        python = str(python_for("paimon"))
        cmd = [python, "-m", "bench.pipeline.paimon_job", *argv,
               "--jars", str(JARS), "--small-below", str(SMALL_BELOW),
               "--large-from", str(LARGE_FROM)]  # fmt: skip
        # Spark's Python workers run the job's interpreter (PySpark 3.5), not the project's
        env = dict(os.environ, PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python)
        super().__init__("the Paimon job", cmd, work / "job.log", env=env, cwd=ROOT,
                         stop_timeout_s=90.0)  # fmt: skip

    def await_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not (self.work / JOB_READY).is_file():
            self.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Paimon job's streams not running in {timeout_s:.0f} s: "
                                   f"{self.log_path}")  # fmt: skip
            time.sleep(0.5)


def main() -> None:
    ns = side_args(__doc__)
    stop = stop_event()
    argv = ["--bootstrap", ns.bootstrap, "--topic", ns.topic, "--customers-topic",
            ns.customers_topic, "--customers", str(ns.customers), "--work", str(ns.work),
            "--trigger", ns.trigger]  # fmt: skip
    with contextlib.ExitStack() as stack, readable_errors():
        job = Job(argv, ns.work)
        stack.callback(job.stop)
        job.await_ready(START_TIMEOUT_S)
        warehouse = ns.work / "paimon"
        probe = ProbeProcess("bench.pipeline.paimon_probe", ns,
                             ["--warehouse", str(warehouse)], PAIMON_RS.env())  # fmt: skip
        stack.callback(probe.stop)
        announce_ready(ns.work, {"spark": job.pid, "probe": probe.pid})
        while not stop.is_set():
            job.check()
            probe.check()
            stop.wait(1.0)


if __name__ == "__main__":
    main()
