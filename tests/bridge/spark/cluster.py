"""A Spark standalone cluster on 127.0.0.1 from PySpark's own distribution (issue 26):
one master and two workers, each a JVM we start and stop by process group; executors
run in their own JVMs with their own Python workers.

The executors' (and the driver's, under spark-submit) Python is a virtualenv that has
the project's dependencies but not the project: the code reaches them only as a cluster
ships it, a zip of the packages via ``--py-files`` / ``spark.submit.pyFiles``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import venv
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from logstore.localhost import free_port

ROOT = Path(__file__).resolve().parents[3]
SPARK_HOME = Path(pyspark.__file__).parent
START_TIMEOUT_S = 90


@dataclass
class SparkCluster:
    master_url: str
    python: str  # an interpreter with the dependencies, without the project
    package_zip: str  # bridge, filestore and logstore, as a user ships them
    logs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def log_tail(self, lines: int = 30) -> str:
        out = []
        for log in sorted(self.logs.glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(out)


def python_without_project(where: Path) -> str:
    """A virtualenv seeing this one's site-packages through a .pth (so not the project's
    own editable-install hook): ``import bridge`` fails there unless the code is shipped."""
    venv.EnvBuilder(with_pip=False).create(where)
    site = next(Path(where).glob("lib/python*/site-packages"))
    ours = next(p for p in map(Path, sys.path) if p.name == "site-packages" and p.is_dir())
    (site / "deps.pth").write_text(f"{ours}\n")
    return str(where / "bin" / "python")


def package_zip(where: Path) -> str:
    path = where / "dts.zip"
    with zipfile.ZipFile(path, "w") as z:
        for pkg in ("bridge", "filestore", "logstore"):
            for f in (ROOT / pkg).rglob("*"):
                if f.is_file() and "__pycache__" not in f.parts:
                    z.write(f, f.relative_to(ROOT))
    return str(path)


def _start(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _wait_for(log: Path, text: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError(f"{log.name}: no {text!r} in {START_TIMEOUT_S}s:\n{log.read_text()[-3000:]}")


@contextmanager
def spark_cluster(work: Path, workers: int = 2) -> Iterator[SparkCluster]:
    """Master + ``workers`` workers (1 core, 1 GiB each) on loopback; stopped by PID."""
    work.mkdir(parents=True, exist_ok=True)
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    python = python_without_project(work / "venv")
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(work / "local"),
        "PYSPARK_PYTHON": python,
    }
    env.pop("PYTHONPATH", None)
    port = free_port()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    cluster = SparkCluster(f"spark://127.0.0.1:{port}", python, package_zip(work), logs)
    try:
        master_log = logs / "master.log"
        master = _start(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(free_port())],
            master_log,
            env,
        )  # fmt: skip
        cluster.procs.append(master)
        _wait_for(master_log, "I have been elected leader", master)
        for i in range(workers):
            log = logs / f"worker-{i}.log"
            proc = _start(
                [spark_class, "org.apache.spark.deploy.worker.Worker", cluster.master_url,
                 "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                 "--webui-port", str(free_port()), "--work-dir", str(work / f"worker-{i}")],
                log,
                env,
            )  # fmt: skip
            cluster.procs.append(proc)
            _wait_for(log, "Successfully registered with master", proc)
        yield cluster
    finally:
        for proc in reversed(cluster.procs):  # workers first: they stop their executors
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in cluster.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
