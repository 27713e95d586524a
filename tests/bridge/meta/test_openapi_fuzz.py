"""The MetaService API fuzzed from its own OpenAPI spec (schemathesis): valid and invalid
input alike never gets a 5xx, every response matches the spec, bad input gets 4xx + reason.

JSON Schema has no NaN or Infinity, so schemathesis never generates them; every case with
a JSON body is also sent with its numbers replaced by NaN, Infinity, -Infinity and 1e400
(Python's json parser reads them all), which must get a 4xx too."""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode

from bridge.meta.models import JobKind, JobSpec, TableBarrierReport
from bridge.meta.server import create_app
from bridge.meta.store import Store

_tmp = Path(tempfile.mkdtemp(prefix="dts-meta-fuzz-"))
_store = Store.for_warehouse(_tmp, heartbeat_timeout_ms=60_000)
# Some known state, so that fuzzed reads also reach the paths that find something.
_store.register_job(JobSpec(job_id="w0", kind=JobKind.WORKER, sinks=["db.t0"]))
_store.register_job(
    JobSpec(job_id="s1", kind=JobKind.SPARK_STREAMING, sources=["db.t0"], sinks=["db.t1"])
)
_store.report_barriers(
    [
        TableBarrierReport(table=t, barrier=b, snapshot_id=i)
        for i, b in enumerate((1, 2))
        for t in ("db.t0", "db.t1")
    ]
)
app = create_app(_store)
_raw = TestClient(app, raise_server_exceptions=False)
_counts = {"cases": 0, "non_finite": 0, "server_errors": 0}
_NON_FINITE = ("NaN", "Infinity", "-Infinity", "1e400")

schema = schemathesis.openapi.from_asgi("/openapi.json", app)
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], max_examples=40
)


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    print(
        f"\nschemathesis: {_counts['cases']} cases, {_counts['non_finite']} non-finite "
        f"variants, {_counts['server_errors']} server errors"
    )
    _store.close()
    shutil.rmtree(_tmp, ignore_errors=True)


def _with_numbers(body: Any, token: str) -> tuple[str, int]:
    """``body`` as JSON text with every number (and a bare top level) replaced by ``token``."""
    marker = "__non_finite__"
    count = itertools.count()

    def swap(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: swap(x) for k, x in v.items()}
        if isinstance(v, list):
            return [swap(x) for x in v]
        if isinstance(v, int | float) and not isinstance(v, bool):
            next(count)
            return marker
        return v

    text = json.dumps(swap(body)).replace(f'"{marker}"', token)
    return text, next(count)


def _send_non_finite(case: schemathesis.Case) -> None:
    if not isinstance(case.body, dict | list) and case.body is not None:
        return
    body = case.body if case.body is not None else {"barrier": 0}
    for token in _NON_FINITE:
        text, numbers = _with_numbers(body, token)
        if not numbers:
            text = json.dumps({"barrier": 0, "snapshot_id": 0}).replace("0", token)
        response = _raw.request(
            case.method,
            case.formatted_path,
            params=case.query,
            content=text,
            headers={"content-type": "application/json"},
        )
        _counts["non_finite"] += 1
        if response.status_code >= 500:
            _counts["server_errors"] += 1
        assert response.status_code < 500, (case.method, case.formatted_path, text, response.text)


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_spec(case: schemathesis.Case) -> None:
    _counts["cases"] += 1
    response = case.call_and_validate()
    if response.status_code >= 500:
        _counts["server_errors"] += 1
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        body = response.json()
        assert body.get("detail"), f"4xx without a reason: {response.text}"
    if case.method in ("POST", "PUT", "PATCH"):
        _send_non_finite(case)
