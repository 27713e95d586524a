"""The MetaService API fuzzed from its own OpenAPI spec (schemathesis): valid and invalid
input alike never gets a 5xx, every response matches the spec, bad input gets 4xx + reason."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
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

schema = schemathesis.openapi.from_asgi("/openapi.json", app)
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], max_examples=40
)


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    _store.close()
    shutil.rmtree(_tmp, ignore_errors=True)


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_spec(case: schemathesis.Case) -> None:
    response = case.call_and_validate()
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        body = response.json()
        assert body.get("detail"), f"4xx without a reason: {response.text}"
