"""The demo's moving parts: broker, MetaService and worker processes, the Spark session and
its two streaming jobs.

Every starter returns an object with ``stop()``; the runner pushes those on an
``ExitStack`` so everything stops in reverse order, also on Ctrl-C. Child processes
run in their own session: a terminal's Ctrl-C reaches only the demo, which stops them
in order (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from bridge.demo.errors import DemoError
from bridge.demo.model import ENRICHED, ORDERS, SOURCES, TOTALS, spark_enriched, spark_totals
from bridge.meta.client import MetaClient
from logstore.localhost import free_port

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


#: the worker's consumer group (the secured demo grants its principal READ on it)
WORKER_GROUP = "dts-demo-worker"


@dataclass
class ServiceProcess:
    """A `dts` subprocess with its log file."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    address: str = ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(line for line in text if "rdkafka" not in line)[-4000:] if text else ""

    def check(self) -> None:
        if not self.alive():
            raise DemoError(
                f"{self.name} exited with code {self.proc.returncode}; its log "
                f"({self.log_path}) ends with:\n{self.tail()}"
            )

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM (both `dts` services drain on it), SIGKILL if it does not exit in time."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start_dts(name: str, args: list[str], log_dir: Path) -> ServiceProcess:
    """Run ``dts <args>`` (this interpreter) in its own session, output to ``<log_dir>/<name>.log``."""
    log_path = log_dir / f"{name}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bridge", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    return ServiceProcess(name, proc, log_path)


def wait_until(
    cond: Callable[[], bool],
    timeout_s: float,
    what: str,
    check: Callable[[], None] | None = None,
    interval_s: float = 0.2,
) -> bool:
    """Poll ``cond`` until true; ``check`` raises when a part died. False on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check is not None:
            check()
        if cond():
            return True
        time.sleep(interval_s)
    return False


def start_meta(
    warehouse: str,
    log_dir: Path,
    tls_args: list[str] | None = None,
    keep_barriers: int | None = None,
) -> ServiceProcess:
    """`dts meta serve` on a free port with its SQLite database under the warehouse
    (returns at once; ``await_meta`` waits for its address); ``tls_args``: its
    ``--tls-cert``/``--tls-key`` (its token comes from the environment, DTS_META_TOKEN);
    ``keep_barriers``: its ``--keep-barriers`` (None: the service's default)."""
    keep = ["--keep-barriers", str(keep_barriers)] if keep_barriers is not None else []
    return start_dts(
        "metaservice",
        [
            "meta",
            "serve",
            "--port",
            "0",
            "--warehouse",
            warehouse,
            "--heartbeat-timeout-ms",
            "60000",
            *keep,
            *(tls_args or []),
        ],
        log_dir,
    )


def await_meta(svc: ServiceProcess, timeout_s: float = 60.0) -> str:
    """The MetaService's address, from the first line it prints."""
    found: list[str] = []

    def listening() -> bool:
        m = re.search(r"MetaService listening on (https?://\S+)", svc.tail())
        if m:
            found.append(m.group(1))
        return bool(found)

    if not wait_until(listening, timeout_s, "the MetaService", svc.check):
        raise DemoError(
            f"the MetaService did not start within {timeout_s:.0f} s; see {svc.log_path}"
        )
    svc.address = found[0]
    return svc.address


def start_worker(warehouse: str, bootstrap: str, meta_url: str, log_dir: Path) -> ServiceProcess:
    """`dts worker` for the two source tables, /metrics and /status on a free port. It
    creates the tables' topics, registers with the MetaService (role ``flusher``) and
    reports each committed barrier there."""
    port = free_port()
    svc = start_dts(
        "worker",
        [
            "worker",
            "--warehouse", warehouse,
            "--bootstrap", bootstrap,
            "--tables", ",".join(SOURCES),
            "--web-port", str(port),
            "--group", WORKER_GROUP,
            "--meta-url", meta_url,
            "--session-timeout", "6",
        ],
        log_dir,
    )  # fmt: skip
    svc.address = f"http://127.0.0.1:{port}"
    return svc


def http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def meta_has_barrier(meta_url: str, table: str, barrier: int) -> bool:
    """Whether the MetaService knows ``table`` completed ``barrier`` (the worker reports it)."""
    try:
        with MetaClient(meta_url, timeout_s=2.0) as client:
            latest = client.table(table).latest_barrier
    except Exception:  # not reported yet (unknown table) or a slow answer: poll again
        return False
    return latest is not None and latest >= barrier


# ---- Spark -------------------------------------------------------------------------------


def start_spark(work_dir: Path, warehouse: str) -> Any:
    """A local[2] SparkSession on 127.0.0.1, quiet (errors only), with `dts` registered."""
    # the Spark imports here and below load pyspark: not for the rest of the demo
    # (`dts demo clean`, the Arrow checks) nor for importing bridge.demo
    from bridge.spark.session import local_session

    conf = {
        "spark.sql.streaming.stopTimeout": "30s",  # bounded Ctrl-C
        "spark.dts.warehouse": warehouse,
    }
    return local_session("dts-demo", work_dir, conf=conf)


class SparkStarter:
    """Starts the SparkSession in a thread (the JVM takes 15-50 s) while the rest starts."""

    def __init__(self, work_dir: Path, warehouse: str) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="dts-demo-spark")
        self._future = self._pool.submit(start_spark, work_dir, warehouse)

    def session(self, timeout_s: float = 300.0) -> Any:
        from bridge.spark import register

        try:
            spark = self._future.result(timeout=timeout_s)
        except Exception as e:
            raise DemoError(
                f"Spark did not start ({type(e).__name__}: {str(e)[:300]}); it needs Java 17 "
                "(java on PATH or JAVA_HOME)"
            ) from e
        # py4j pins each Python thread to a JVM thread; Spark's active session is per thread
        spark._jvm.SparkSession.setActiveSession(spark._jsparkSession)
        register(spark)
        return spark

    def stop(self) -> None:
        """Wait for a start under way (a JVM launch cannot be interrupted), then stop it."""
        try:
            spark = self._future.result(timeout=300)
        except Exception:
            spark = None
        stop_spark(spark)  # also a JVM whose session failed to start
        self._pool.shutdown(wait=False)


@dataclass
class StreamingJobs:
    """The two Spark streaming jobs orders -> orders_enriched and orders -> customer_totals."""

    spark: SparkSession
    warehouse: str
    meta_url: str
    checkpoints: Path
    trigger: str = "2 seconds"
    queries: dict[str, Any] = field(default_factory=dict)

    def _source(self) -> Any:
        return (
            self.spark.readStream.format("dts")
            .option("warehouse", self.warehouse)
            .option("tier", "file")
            .load(ORDERS)
        )

    def checkpoint(self, table: str) -> str:
        return str(self.checkpoints / table)

    def start(self) -> StreamingJobs:
        plans = {
            ENRICHED: (spark_enriched, "append"),
            TOTALS: (spark_totals, "complete"),
        }
        for table, (transform, mode) in plans.items():
            self.queries[table] = (
                transform(self._source())
                .writeStream.format("dts")
                .queryName(table.replace(".", "_"))
                .outputMode(mode)
                .option("warehouse", self.warehouse)
                .option("meta.url", self.meta_url)
                .option("checkpointLocation", self.checkpoint(table))
                .trigger(processingTime=self.trigger)
                .start(table)
            )
        return self

    def check(self) -> None:
        for table, q in self.queries.items():
            exc = q.exception()
            if exc is not None:
                raise DemoError(f"the Spark streaming job writing {table} failed: {exc}")

    def batches(self) -> dict[str, int]:
        """Micro-batches each job completed (Spark's count of progress reports)."""
        out = {}
        for table, q in self.queries.items():
            progress = q.lastProgress
            out[table] = int(progress["batchId"]) + 1 if progress else 0
        return out

    def stop(self) -> None:
        from bridge.spark.write.meta_jobs import finish_streaming_job

        if self.queries:
            # a stop cancels the micro-batch in flight; Spark logs the cancelled tasks as
            # ERRORs with Java stack traces (until the session stops): that is the stop
            # working, not a failure the demo should show
            with contextlib.suppress(Exception):
                next(iter(self.queries.values())).sparkSession.sparkContext.setLogLevel("OFF")
        for table, q in self.queries.items():
            with contextlib.suppress(Exception):
                q.stop()
            with contextlib.suppress(Exception):
                finish_streaming_job(self.meta_url, self.checkpoint(table))
        self.queries.clear()


def stop_spark(spark: SparkSession | None) -> None:
    """Stop the session and the JVM it launched (pyspark would keep it for the next session)."""
    from pyspark import SparkContext

    if spark is not None:
        with contextlib.suppress(Exception):
            spark.stop()
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None) if gateway is not None else None
    with contextlib.suppress(Exception):
        if gateway is not None:
            gateway.shutdown()
    if proc is not None and proc.poll() is None:
        with contextlib.suppress(Exception):
            proc.stdin.close()  # the JVM exits when its stdin closes
            proc.wait(timeout=15)
    if proc is not None and proc.poll() is None:
        proc.kill()
    SparkContext._gateway = None
    SparkContext._jvm = None
