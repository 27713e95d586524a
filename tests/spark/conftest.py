"""Fixtures of the Spark bridge tests: the shared session with `dts` registered, a MetaService."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def dts(spark: Any) -> Any:
    """The shared SparkSession with the `dts` data source registered."""
    from bridge.spark import register

    register(spark)
    return spark


@pytest.fixture
def meta_url(tmp_path: Path) -> Iterator[str]:
    """A real MetaService (uvicorn in a thread, 127.0.0.1, free port) on its own store.

    The same way tests/meta/conftest.py starts one (its fixtures are not visible here).
    """
    import uvicorn

    from bridge.meta.server import create_app
    from bridge.meta.store import Store

    store = Store.for_warehouse(tmp_path / "meta", heartbeat_timeout_ms=30_000)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(store), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("MetaService test server did not start")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        store.close()
