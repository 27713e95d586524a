"""MetaService fixtures: a store on a fresh warehouse, and a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.meta.client import MetaClient
from bridge.meta.store import Store
from tests.bridge.support import RunningServer
from tests.postgres import local_postgres


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


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throw-away PostgreSQL server, skipped where its binaries are not installed."""
    with local_postgres() as url:
        yield url
