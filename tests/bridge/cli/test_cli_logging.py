"""What long-running commands print: librdkafka's noise once, plain log files, a stop line."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer

from logstore.broker import EmbeddedBroker
from logstore.client_config import CLIENT_LOGGER, confluent_config


def test_repeated_connection_failures_are_logged_once(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    # retry fast so that librdkafka fails many times within the test's bounded wait
    producer = Producer(
        confluent_config(
            "127.0.0.1:1", {"reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 20}
        )
    )
    caplog.set_level(logging.DEBUG, logger=CLIENT_LOGGER)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        producer.poll(0.2)  # delivers queued librdkafka logs to the Python logger
        failures = [r for r in caplog.records if "Connect to" in r.getMessage()]
        if failures and time.monotonic() > deadline - 27:  # >= 3 s of retries seen
            break
    failures = [r for r in caplog.records if "Connect to" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in failures]
    assert failures[0].getMessage().startswith("Kafka client: 127.0.0.1:1/bootstrap: Connect to")
    assert "repeats not shown" in failures[0].getMessage()
    # nothing reached stderr in librdkafka's raw format
    assert "|FAIL|" not in capfd.readouterr().err
    producer.flush(0)


def _wait_for(
    path: Path, text: str, proc: subprocess.Popen[bytes], timeout_s: float, poll_s: float = 0.2
) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        content = path.read_text(errors="replace")
        if text in content:
            return content
        if proc.poll() is not None:
            pytest.fail(f"exited with {proc.returncode} before {text!r}:\n{content}")
        time.sleep(poll_s)
    pytest.fail(f"no {text!r} within {timeout_s} s:\n{path.read_text(errors='replace')}")


def _run_to_stop(
    args: list[str],
    log: Path,
    ready: str,
    stopped: str,
    env: dict[str, str] | None = None,
    serving: Callable[[str], bool] | None = None,
    poll_s: float = 0.2,
) -> str:
    """Start ``dts ARGS`` with its output in a file (not a terminal), SIGTERM it once
    ``ready`` shows (and ``serving(output)`` holds), and return the whole output once
    ``stopped`` shows."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bridge", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
    try:
        content = _wait_for(log, ready, proc, 120, poll_s)
        deadline = time.monotonic() + 120
        while serving is not None and not serving(content):
            assert proc.poll() is None and time.monotonic() < deadline, content
            time.sleep(0.2)
            content = log.read_text(errors="replace")
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running 60 s after SIGTERM:\n{log.read_text(errors='replace')}")
        return _wait_for(log, stopped, proc, 1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("level", ["info", "warning"])
def test_worker_logs_plain_lines_at_the_environment_level_and_says_it_stopped(
    broker: EmbeddedBroker, warehouse: Path, tmp_path: Path, level: str
) -> None:
    create = subprocess.run(
        [sys.executable, "-m", "bridge", "table", "create", "shop.plainlog",
         "--schema", "id:int64 not null", "-k", "id", "--warehouse", str(warehouse)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert create.returncode == 0, create.stderr
    log = tmp_path / "worker.log"
    args = ["worker", "--warehouse", str(warehouse), "--bootstrap", broker.bootstrap,
            "--web-port", "0", "--group", f"plainlog-{level}"]  # fmt: skip
    # stopped once it serves /status: Faust has started (and drawn its spinner, if any)
    out = _run_to_stop(
        args, log, "stop with Ctrl-C", "stopped;", {"DTS_LOG_LEVEL": level}, _status_answers
    )
    assert "\x1b[" not in out  # no terminal escape codes (colours, cursor) in a file
    # DTS_LOG_LEVEL reached Faust's logging
    assert (" INFO " in out) == (level == "info")
    assert "Traceback" not in out
    assert "last barriers committed: {'shop.plainlog':" in out


def test_worker_stopped_before_faust_starts_says_it_stopped(
    broker: EmbeddedBroker, warehouse: Path, tmp_path: Path
) -> None:
    """SIGTERM within milliseconds of the addresses showing, before Faust has installed
    its signal handlers: the worker still stops cleanly with its stop line."""
    create = subprocess.run(
        [sys.executable, "-m", "bridge", "table", "create", "shop.earlystop",
         "--schema", "id:int64 not null", "-k", "id", "--warehouse", str(warehouse)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert create.returncode == 0, create.stderr
    args = ["worker", "--warehouse", str(warehouse), "--bootstrap", broker.bootstrap,
            "--web-port", "0", "--group", "earlystop"]  # fmt: skip
    out = _run_to_stop(args, tmp_path / "worker.log", "stop with Ctrl-C", "stopped;", poll_s=0.002)
    assert "Traceback" not in out
    assert "last barriers committed: {'shop.earlystop':" in out


def _status_answers(output: str) -> bool:
    url = re.search(r"status\s+(http://\S+/status)", output)
    assert url, output
    try:
        return httpx.get(url.group(1), timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_exporter_and_meta_service_say_they_stopped(warehouse: Path, tmp_path: Path) -> None:
    out = _run_to_stop(
        ["exporter", "--warehouse", str(warehouse), "--port", "0"],
        tmp_path / "exporter.log",
        "/metrics",
        "dts exporter stopped",
    )
    assert "Traceback" not in out
    out = _run_to_stop(
        ["meta", "serve", "--port", "0", "--warehouse", str(warehouse)],
        tmp_path / "meta.log",
        "Ctrl-C stops it",
        "MetaService stopped",
    )
    assert "Traceback" not in out


def test_a_later_client_says_its_failure_again(caplog: pytest.LogCaptureFixture) -> None:
    """Once per condition and client, not per process: the test above failed whenever a
    test before it in the same process had met a refused connection (any port), and an
    operator would not see a new outage's first line either."""
    caplog.set_level(logging.DEBUG, logger=CLIENT_LOGGER)
    for n in (1, 2):
        producer = Producer(
            confluent_config(
                "127.0.0.1:1", {"reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 20}
            )
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            producer.poll(0.2)
            failures = [r for r in caplog.records if "Connect to" in r.getMessage()]
            if len(failures) >= n:
                break
        producer.flush(0)
    assert len([r for r in caplog.records if "Connect to" in r.getMessage()]) == 2
