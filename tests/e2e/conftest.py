"""End-to-end fixtures: a real MetaService (uvicorn on 127.0.0.1) next to the shared
broker and Spark session of tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bridge.support import meta_service


@pytest.fixture
def meta_url(tmp_path: Path) -> Iterator[str]:
    """A real HTTP MetaService on its own SQLite store, started the way tests/bridge/meta does."""
    # long enough that a slow micro-batch on a busy 2-core box never times a job out
    with meta_service(tmp_path / "meta", heartbeat_timeout_ms=120_000) as url:
        yield url
