"""MetaService fixtures: a store on a fresh warehouse, and a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.meta.client import MetaClient
from bridge.meta.store import Store
from tests.bridge.support import RunningServer


class FakeClock:
    """Milliseconds that move only when a test says so."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(warehouse: Path, clock: FakeClock) -> Iterator[Store]:
    s = Store.for_warehouse(warehouse, heartbeat_timeout_ms=10_000, clock=clock)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def server(warehouse: Path) -> Iterator[RunningServer]:
    """A real HTTP MetaService with a real clock and a short heartbeat timeout."""
    s = Store.for_warehouse(warehouse, heartbeat_timeout_ms=1_000)
    try:
        with RunningServer(s, sweep_interval_s=0.1) as running:
            yield running
    finally:
        s.close()


@pytest.fixture
def client(server: RunningServer) -> Iterator[MetaClient]:
    with MetaClient(server.url) as c:
        yield c


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throw-away PostgreSQL server (Debian's postgresql binaries, run as user postgres),
    skipped where those are not installed."""
    import os
    import shutil
    import subprocess

    initdb = shutil.which("initdb") or "/usr/lib/postgresql/15/bin/initdb"
    postgres = shutil.which("postgres") or "/usr/lib/postgresql/15/bin/postgres"
    runuser = shutil.which("runuser")
    if not (os.path.exists(initdb) and os.path.exists(postgres)):
        pytest.skip("PostgreSQL binaries are not installed")
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        if runuser is None:
            pytest.skip("running as root without runuser")
        as_user = [runuser, "-u", "postgres", "--"]
    import tempfile

    # not under pytest's tmp dir: that one is private to root, and postgres runs as postgres
    base = Path(tempfile.mkdtemp(prefix="dts-meta-pg-"))
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
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    try:
        import psycopg

        deadline = time.monotonic() + 30
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
