"""A real MetaService for tests: ``create_app(store)`` served by uvicorn in a thread on a free
127.0.0.1 port. One plain module so tests/bridge/meta, tests/bridge/spark and tests/e2e start it the same way
(conftest modules cannot import one another)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from bridge.meta.auth import MetaAuth
from bridge.meta.server import create_app
from bridge.meta.store import Store


class RunningServer:
    """create_app(store) served by uvicorn in a thread, on a free port."""

    def __init__(
        self,
        store: Store,
        sweep_interval_s: float | None = None,
        auth: MetaAuth | None = None,
        **app_options: Any,
    ) -> None:
        self.store = store
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        app = create_app(store, sweep_interval_s=sweep_interval_s, auth=auth, **app_options)
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def __enter__(self) -> RunningServer:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("MetaService test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


@contextmanager
def meta_service(root: Path, heartbeat_timeout_ms: int) -> Iterator[str]:
    """The URL of a MetaService on its own SQLite store under ``root``, closed afterwards."""
    store = Store.for_warehouse(root, heartbeat_timeout_ms=heartbeat_timeout_ms)
    try:
        with RunningServer(store) as running:
            yield running.url
    finally:
        store.close()
