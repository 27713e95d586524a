"""The tests' PostgreSQL server (``bench.postgres_server``, which the PostgreSQL benchmark
shares): a test skips where PostgreSQL cannot run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from bench.postgres_server import PostgresMissing, PostgresServer
from bench.postgres_server import postgres_server as _server

__all__ = ["PostgresServer", "local_postgres", "postgres_server"]


@contextlib.contextmanager
def postgres_server(logical: bool = False) -> Iterator[PostgresServer]:
    """A started server, removed on the way out; skips the test where PostgreSQL cannot run."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(_server(logical))
        except PostgresMissing as exc:
            pytest.skip(str(exc))
        yield server


@contextlib.contextmanager
def local_postgres(logical: bool = False) -> Iterator[str]:
    """Yields a started server's URL (see ``postgres_server``)."""
    with postgres_server(logical) as server:
        yield server.url
