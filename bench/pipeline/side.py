"""How the driver runs a pipeline: ``python -m bench.pipeline.<side> --bootstrap ...
--topic ... --work DIR``. A side builds its pipeline on the topic, starts its reader
(``probe.Sampler`` into ``DIR/samples.jsonl``), writes ``DIR/ready.json`` (the PIDs of
its parts, for CPU accounting) and runs until SIGTERM, then stops everything it started.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

SAMPLES = "samples.jsonl"
READY = "ready.json"


class SideFailed(RuntimeError):
    """A side's pipeline failed; the message is the error's text, taken while it could be."""


@contextlib.contextmanager
def readable_errors() -> Iterator[None]:
    """Re-raise an error as its text. Inside the side's clean-up stack: that stack stops
    Spark first, and a Spark error's text is fetched from Spark (after the stop the log
    showed ``<exception str() failed>`` instead of what went wrong)."""
    try:
        yield
    except Exception as exc:
        raise SideFailed(f"{type(exc).__name__}: {exc}") from None


def side_args(
    description: str | None, extra: Sequence[tuple[str, str, str]] = ()
) -> argparse.Namespace:
    """The options every side takes, plus ``extra`` (name, default, help) of its own."""
    ap = argparse.ArgumentParser(description=description)
    for name, default, help_text in extra:
        ap.add_argument(name, default=default, help=help_text)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True, help="the Debezium CDC topic of orders")
    ap.add_argument("--customers-topic", required=True, help="the Debezium topic of customers")
    ap.add_argument("--customers", type=int, required=True,
                    help="how many customers its snapshot holds (loaded before the streams)")  # fmt: skip
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--trigger", default="1 second", help="Spark streams' processing time")
    ap.add_argument("--probe-interval", type=float, default=1.0)
    return ap.parse_args()


def debezium_stream(spark: Any, bootstrap: str, topic: str, envelope: str) -> Any:
    """Spark's Kafka source on a Debezium topic from its start: each change's envelope as
    ``e`` (parsed with the DDL schema ``envelope``) beside its Kafka ``offset``. Both
    stitched jobs read their topics so (Delta's on PySpark 4, Paimon's on 3.5)."""
    from pyspark.sql import functions as F

    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .where("value IS NOT NULL")  # Debezium's tombstones after deletes
        .select(F.from_json(F.col("value").cast("string"), envelope).alias("e"), "offset")
    )


def check_queries(queries: list[Any]) -> None:
    """Raise the first failure of a streaming query, naming the query."""
    for q in queries:
        if (failure := q.exception()) is not None:  # one call to the JVM a query
            raise RuntimeError(f"stream {q.name} failed: {failure}")


def stop_queries(queries: list[Any]) -> None:
    """Stop every streaming query, whatever one of them raises on the way."""
    for q in queries:
        with contextlib.suppress(Exception):
            q.stop()


def stop_event() -> threading.Event:
    """Set on SIGTERM or SIGINT (the driver's stop, or Ctrl-C)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    return stop


def await_count(count: Callable[[], int], want: int, timeout_s: float, what: str) -> None:
    """Until ``count()`` reaches ``want`` (polled twice a second), or fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    have = count()
    while have < want:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: {have} of {want} rows after {timeout_s:.0f} s")
        time.sleep(0.5)
        have = count()


def announce_ready(work: Path, pids: dict[str, int], urls: dict[str, str] | None = None) -> None:
    """The side's processes by name, and ``urls`` of what they serve (the worker's
    metrics, which the soak samples)."""
    tmp = work / (READY + ".tmp")
    tmp.write_text(json.dumps({"pids": {"driver": os.getpid(), **pids}, "urls": urls or {}}))
    tmp.rename(work / READY)  # whole or absent: the driver polls for it


def spark_pid() -> int:
    """The PID of the JVM PySpark launched (Spark's Python workers are its children)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    return int(proc.pid) if proc is not None else os.getpid()


#: both sides' Spark driver heap
DRIVER_MEMORY = "2g"


class ChildProcess:
    """A process a side starts (its output in ``log_path``), checked and stopped by PID.
    In the side's process group: a side killed with its group takes it along."""

    def __init__(self, what: str, cmd: Sequence[str], log_path: Path, *,
                 env: dict[str, str] | None = None, cwd: Path | None = None,
                 stop_timeout_s: float = 30.0) -> None:  # fmt: skip
        self.what, self.log_path, self.stop_timeout_s = what, log_path, stop_timeout_s
        with log_path.open("wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env)  # fmt: skip
        self.pid = self.proc.pid

    def check(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.what} exited ({self.proc.returncode}): {tail}")

    def stop(self) -> None:
        from logstore.localhost import stop_process

        stop_process(self.proc, self.stop_timeout_s)


class ProbeProcess(ChildProcess):
    """A side's reader in a process of its own (``python -m <module>``), so what it costs
    is measured apart from the pipeline and competes with it only for the cores."""

    def __init__(self, module: str, ns: argparse.Namespace, args: Sequence[str],
                 env: dict[str, str] | None = None) -> None:  # fmt: skip
        cmd = [sys.executable, "-m", module, "--work", str(ns.work),
               "--interval", str(ns.probe_interval), *args]  # fmt: skip
        super().__init__("the probe", cmd, ns.work / "probe.log", env=env)


def probe_args(description: str | None) -> argparse.Namespace:
    """The options of a probe process (``ProbeProcess``): each side's probe uses its own."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--paths", nargs="*", default=[], help="TABLE=PATH of each table read")
    ap.add_argument("--warehouse")
    ap.add_argument("--meta-url")
    return ap.parse_args()
