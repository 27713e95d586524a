"""End-to-end fixtures: a real MetaService (uvicorn on 127.0.0.1) next to the shared
broker and Spark session of tests/conftest.py."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def meta_url(tmp_path: Path) -> Iterator[str]:
    """A real HTTP MetaService on its own SQLite store, started the way tests/meta does."""
    import uvicorn

    from bridge.meta.server import create_app
    from bridge.meta.store import Store

    # long enough that a slow micro-batch on a busy 2-core box never times a job out
    store = Store.for_warehouse(tmp_path / "meta", heartbeat_timeout_ms=120_000)
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
