"""What this machine offers the processes dts starts (brokers, Prometheus, Spark's
servers, the worker's web view): a free port on the loopback interface, and the cache
directory where the set-up keeps the jars it fetched, and how a process it started
stops. Every part binds 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from pathlib import Path

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def cache_dir() -> Path:
    """Where the set-up keeps downloaded jars: ``$DTS_CACHE`` or ``~/.cache/dts``."""
    given = os.environ.get("DTS_CACHE")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dts"


def stop_process(proc: subprocess.Popen[bytes] | None, timeout_s: float) -> None:
    """SIGTERM (a clean stop), then SIGKILL once ``timeout_s`` has passed."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout_s)


def kill_process(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL (a crash: nothing flushed)."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


def write_private(path: Path, data: str | bytes) -> Path:
    """Write a file only its owner can read (it holds a key or a password)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return path
