"""A MetaClient loads the CA bundle only for an https MetaService: the Spark sink makes
clients every micro-batch and task, and loading the bundle cost it ~25 ms each."""

from __future__ import annotations

import ssl
from typing import Any

import pytest

from bridge.meta.client import MetaClient


@pytest.fixture
def bundle_loads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The CA bundles loaded while the test runs (httpx verifies through this call)."""
    loads: list[Any] = []
    real = ssl.create_default_context

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        loads.append(kwargs.get("cafile"))
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counting)
    return loads


@pytest.mark.parametrize("url", ["http://127.0.0.1:8765", "HTTP://meta.internal:80/"])
def test_a_plain_http_client_loads_no_ca_bundle(bundle_loads: list[Any], url: str) -> None:
    with MetaClient(url):
        pass
    assert bundle_loads == []


def test_an_https_client_still_verifies_the_server(bundle_loads: list[Any]) -> None:
    with MetaClient("https://meta.example:8443") as client:
        assert len(bundle_loads) == 1
        transport: Any = client._http._transport
        assert transport._pool._ssl_context.verify_mode == ssl.CERT_REQUIRED
