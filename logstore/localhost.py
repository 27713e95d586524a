"""What this machine offers the processes dts starts (brokers, Prometheus, Spark's
servers, the worker's web view): a free port on the loopback interface, and the cache
directory where the set-up keeps the jars it fetched, and how a process it started
stops. Every part binds 127.0.0.1 only.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import signal
import socket
import subprocess
from pathlib import Path

from logstore.errors import PortError

LOOPBACK = "127.0.0.1"


# Servers dts starts get ports from below the kernel's ephemeral range: a port picked
# there and bound a moment later cannot be taken in between by an outgoing connection or
# by another process binding port 0 (Spark's and Kafka's own servers, any client), which
# is how a worker lost its web port to another process during a CI run.
PORTS_ENV = "DTS_PORTS"
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_SPAN = 12000
# the ports this process handed out lately: two servers it starts at once (a cluster's
# brokers pick all their ports before the first binds) never get the same one
_recent: collections.deque[int] = collections.deque(maxlen=512)


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now, from
    ``$DTS_PORTS`` (``low-high``) or the span just below the ephemeral range."""
    span = port_span()
    if span is None:
        return _kernel_port()
    low, high = span
    size = high - low + 1
    start = random.randrange(size)  # processes picking at once rarely start alike
    for step in range(size):
        port = low + (start + step) % size
        if port not in _recent and _bindable(port):
            _recent.append(port)
            return port
    raise PortError(f"no free TCP port on {LOOPBACK} in {low}-{high} ({PORTS_ENV})")


def port_span() -> tuple[int, int] | None:
    """The ports :func:`free_port` picks from; None where the kernel's ephemeral range is
    unknown (then the kernel picks)."""
    given = os.environ.get(PORTS_ENV)
    if given:
        try:
            low, high = (int(part) for part in given.split("-"))
        except ValueError:
            raise PortError(f"{PORTS_ENV}={given!r}: give a range such as 20000-32767") from None
        if not 1024 <= low <= high <= 65535:
            raise PortError(f"{PORTS_ENV}={given!r}: ports 1024-65535, low first")
        return low, high
    try:
        ephemeral_low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if ephemeral_low <= 1024 + 1000:
        return None
    return max(1024, ephemeral_low - _SPAN), ephemeral_low - 1


def _bindable(port: int) -> bool:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
        return True


def _kernel_port() -> int:
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
