"""A throw-away PostgreSQL server for the tests (Debian's binaries, run as user postgres
when the tests run as root): a data directory per use, 127.0.0.1 and a free port, a
bounded start, stopped by PID. ``logical=True`` sets ``wal_level=logical`` for
Debezium's connector."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

BIN = Path("/usr/lib/postgresql/15/bin")
START_TIMEOUT_S = 30.0


def _binary(name: str) -> str | None:
    found = shutil.which(name) or str(BIN / name)
    return found if os.path.exists(found) else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def local_postgres(logical: bool = False) -> Iterator[str]:
    """Yields the server's URL (user postgres, trust authentication, database postgres);
    skips the test where PostgreSQL is not installed."""
    initdb, postgres = _binary("initdb"), _binary("postgres")
    if initdb is None or postgres is None:
        pytest.skip("PostgreSQL binaries are not installed (make test-tools installs them)")
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        runuser = shutil.which("runuser")
        if runuser is None:
            pytest.skip("running as root without runuser")
        as_user = [runuser, "-u", "postgres", "--"]
    # not under pytest's tmp dir: that one is private to root, and postgres runs as postgres
    base = Path(tempfile.mkdtemp(prefix="dts-pg-"))
    data = base / "data"
    if as_user:
        shutil.chown(base, "postgres")
    subprocess.run(
        [*as_user, initdb, "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    port = _free_port()
    settings = ["-c", "wal_level=logical", "-c", "max_replication_slots=8"] if logical else []
    log = open(base / "server.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            *as_user,
            postgres,
            "-D",
            str(data),
            "-p",
            str(port),
            "-h",
            "127.0.0.1",
            "-k",
            str(base),
            "-F",
            *settings,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    try:
        import psycopg

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                psycopg.connect(url).close()
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(
                        f"PostgreSQL did not start; see {base / 'server.log'}"
                    ) from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(base, ignore_errors=True)
