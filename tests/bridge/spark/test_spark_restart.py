"""Exactly-once across a SIGKILL of the Spark driver (file tier and log tier -> dts sink).

The driver (tests/bridge/spark/stream_driver.py) runs in its own process group with its own
local SparkSession. The test kills the whole group while a later micro-batch is in
flight (at least one batch committed), restarts the driver from the same
checkpoints with Trigger.AvailableNow, and compares the sink tables with the
sources: every row exactly once (the sinks have no primary key, so a duplicate would
show), one sink snapshot per source barrier, in order.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.bridge.spark.support import commit, data_snapshots, make_table, rows, sort

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

DRIVER = Path(__file__).with_name("stream_driver.py")
ROOT = Path(__file__).resolve().parents[3]
BARRIERS = 4
ROWS_PER_BARRIER = 10


def _batch_ids(ck: Path, sub: str) -> set[int]:
    d = ck / sub
    return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.exists() else set()


def _wait(what: str, cond: Any, timeout_s: float, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(
                f"driver exited ({proc.returncode}) before {what}:\n{log.read_text()}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; driver log:\n{log.read_text()}")
        time.sleep(0.1)


def _driver(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, str(DRIVER), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=str(ROOT),
            env=env,
            start_new_session=True,  # its own process group: the JVM and workers die with it
        )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def test_sigkill_driver_mid_batch_then_restart_is_exactly_once(
    warehouse: Path, broker: Any, tmp_path: Path
) -> None:
    from bridge.tables import open_log_writer

    tag = uuid.uuid4().hex[:8]
    file_src = make_table(warehouse, f"db.fsrc_{tag}", pk=False)
    file_dst = make_table(warehouse, f"db.fdst_{tag}", pk=False)
    log_src = make_table(warehouse, f"db.lsrc_{tag}", pk=False, **{"log.topic": f"dts-rs-{tag}"})
    log_dst = make_table(warehouse, f"db.ldst_{tag}", pk=False)
    file_barriers = [(i + 1) * 100 for i in range(BARRIERS)]
    log_barriers = [(i + 1) * 1000 for i in range(BARRIERS)]
    for i, b in enumerate(file_barriers):
        commit(file_src, rows(ROWS_PER_BARRIER, start=i * ROWS_PER_BARRIER), barrier=b)
    written = []
    with open_log_writer(log_src, broker.bootstrap, barrier_interval_s=None) as w:
        for i, b in enumerate(log_barriers):
            batch = rows(ROWS_PER_BARRIER, start=10_000 + i * ROWS_PER_BARRIER, k="L")
            w.write(batch)
            w.barrier(b)
            written.append(batch)

    ck, signals, log = tmp_path / "ck", tmp_path / "signals", tmp_path / "driver.log"
    signals.mkdir()
    args = [
        *("--warehouse", str(warehouse), "--checkpoints", str(ck), "--signals", str(signals)),
        *("--bootstrap", broker.bootstrap, "--delay", "0.05"),
        *("--file-src", file_src.name, "--file-dst", file_dst.name),
        *("--log-src", log_src.name, "--log-dst", log_dst.name),
    ]

    def committed() -> tuple[int, int]:
        return len(data_snapshots(file_dst)), len(data_snapshots(log_dst))

    t0 = time.monotonic()

    def progress(what: str) -> None:  # shown with -s, and in the report of a failure
        print(f"restart test: {what} after {time.monotonic() - t0:.1f} s", flush=True)

    proc = _driver(args, log)
    try:
        _wait("a committed batch per query", lambda: min(committed()) >= 1, 120, proc, log)
        seen = {p.name for p in signals.iterdir()}
        # a task of a later micro-batch has started (and is sleeping): kill the driver now
        _wait(
            "a batch in flight", lambda: {p.name for p in signals.iterdir()} - seen, 30, proc, log
        )
    finally:
        _kill_group(proc)
    at_kill = committed()
    progress(f"SIGKILL with {at_kill} batches committed")
    assert proc.returncode == -signal.SIGKILL
    assert all(n < BARRIERS for n in at_kill), f"the stream had already finished: {at_kill}"
    in_flight = [
        q for q in ("file", "log") if _batch_ids(ck / q, "offsets") - _batch_ids(ck / q, "commits")
    ]
    assert in_flight, "the kill should land while a planned micro-batch was uncommitted"

    # no more sleeping in the restart run: it only has to drain
    restart = _driver([*args, "--delay", "0", "--available-now"], log)
    try:
        assert restart.wait(timeout=150) == 0, log.read_text()
    finally:
        if restart.poll() is None:
            _kill_group(restart)

    progress("restart drained")
    assert sort(file_dst.read()) == sort(file_src.read())
    assert sort(log_dst.read()) == sort(pa.concat_tables(written))
    # one sink snapshot per source barrier, each exactly once, in order
    assert [s.barrier for s in data_snapshots(file_dst)] == file_barriers
    assert [s.barrier for s in data_snapshots(log_dst)] == log_barriers
