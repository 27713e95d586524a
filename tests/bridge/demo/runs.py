"""Running `dts demo` as a user does: a subprocess with a marker in its environment, its
output in a file, and the check that nothing it started is left behind (shared by the
plaintext and the secured demo's tests).

Every process the demo starts (broker, MetaService, worker, the Spark JVM and its Python
workers) inherits the environment, so a marker variable finds any survivor in /proc.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.processes import marked_processes

ROOT = Path(__file__).resolve().parents[3]
MARKER = "DTS_DEMO_TEST_RUN"


def demo_env(tmp: Path, run_id: str) -> dict[str, str]:
    tmp.mkdir(parents=True, exist_ok=True)
    return {
        **os.environ,
        MARKER: run_id,
        "TMPDIR": str(tmp),  # nothing the demo makes may stay here
        "DTS_DEMO_DIR": str(tmp.parent / "demo-runs"),  # kept runs (warehouse, logs, report)
        "PYTHONUNBUFFERED": "1",
        "PYSPARK_PYTHON": sys.executable,
    }


def start_demo(args: list[str], env: dict[str, str], out: Path) -> subprocess.Popen[bytes]:
    with open(out, "wb") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "bridge", "demo", *args],
            stdout=f,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env,
            start_new_session=True,  # our SIGINT goes to the demo only, as a terminal's would
        )


def _marked_processes(run_id: str) -> list[str]:
    return marked_processes(f"{MARKER}={run_id}".encode())


def assert_nothing_left(run_id: str, output: str, tmp: Path) -> None:
    deadline = time.monotonic() + 30  # the Spark JVM exits shortly after its driver
    while (left := _marked_processes(run_id)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, "processes left running:\n" + "\n".join(left)
    ports = {int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", output)}
    assert ports, "the demo printed the addresses of what it runs"
    for port in sorted(ports):
        with socket.socket() as s:
            s.settimeout(1.0)
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers"
    assert not list(tmp.glob("dts-demo-*")), "the demo's temp dir was removed"


def tail(output: str, n: int = 60) -> str:
    return "\n".join(output.splitlines()[-n:])


def wait_for_output(proc: subprocess.Popen[bytes], out: Path, text: str, timeout_s: float) -> None:
    """Wait until the demo printed ``text``; fail if it exits or takes too long."""
    deadline = time.monotonic() + timeout_s
    while text not in out.read_text(errors="replace"):
        assert proc.poll() is None, tail(out.read_text(errors="replace"))
        assert time.monotonic() < deadline, f"the demo never printed {text!r}"
        time.sleep(0.5)


def interrupt(proc: subprocess.Popen[bytes]) -> int:
    """Ctrl-C as a terminal sends it; the exit code (killed after 120 s: a failure)."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
