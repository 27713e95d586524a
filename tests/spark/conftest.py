"""Fixtures of the Spark bridge tests: the shared session with `dts` registered, a MetaService."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.meta_support import meta_service


@pytest.fixture
def dts(spark: Any) -> Any:
    """The shared SparkSession (it has the `dts` data source registered)."""
    return spark


@pytest.fixture
def meta_url(tmp_path: Path) -> Iterator[str]:
    """A real MetaService (uvicorn in a thread, 127.0.0.1, free port) on its own store."""
    with meta_service(tmp_path / "meta", heartbeat_timeout_ms=30_000) as url:
        yield url
