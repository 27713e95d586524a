"""The MetaService trusts no one: malformed bodies get 4xx, callers need a bearer token,
only a table's writer or flusher reports its barriers, and only the job itself or the
admin ends or deletes a job. /health names no secret."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from bridge.meta.auth import ADMIN_TOKEN_ENV, JOB_HEADER, TOKEN_ENV, MetaAuth
from bridge.meta.client import MetaClient
from bridge.meta.errors import Forbidden, Unauthorized, WriterConflict
from bridge.meta.server import create_app
from bridge.meta.store import Store
from tests.bridge.support import RunningServer

USER, ADMIN = "user-secret-1", "admin-secret-2"
BEARER = {"Authorization": f"Bearer {USER}"}
AS_ADMIN = {"Authorization": f"Bearer {ADMIN}"}
NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"]


@pytest.fixture
def api(store: Store) -> Iterator[TestClient]:
    with TestClient(create_app(store, auth=MetaAuth(USER, ADMIN))) as c:
        yield c


@pytest.mark.parametrize("number", NON_FINITE)
def test_non_finite_numbers_in_any_body_are_4xx(store: Store, number: str) -> None:
    bodies = {
        "/jobs": [
            f'{{"kind": "worker", "sinks": ["db.t"], "heartbeat_timeout_ms": {number}}}',
            f'{{"barrier": {number}}}',
        ],
        "/tables/db.t/barriers": [
            f'{{"barrier": {number}}}',
            f'{{"barrier": 1, "snapshot_id": {number}}}',
        ],
        "/barriers": [f'[{{"table": "db.t", "barrier": {number}}}]', f"{number}"],
        "/jobs/j1/finish": [f'{{"state": {number}}}', f'{{"reason": {number}}}'],
    }
    with TestClient(create_app(store), raise_server_exceptions=False) as c:
        for path, variants in bodies.items():
            for body in variants:
                r = c.post(path, content=body, headers={"content-type": "application/json"})
                assert 400 <= r.status_code < 500, (path, body, r.status_code, r.text)
                assert r.json()["detail"], r.text


def test_every_call_but_health_needs_a_token(api: TestClient, warehouse: Path) -> None:
    for method, path in [
        ("GET", "/jobs"),
        ("POST", "/jobs"),
        ("GET", "/tables"),
        ("POST", "/tables/db.t/barriers"),
        ("POST", "/barriers"),
        ("GET", "/lineage"),
        ("DELETE", "/jobs/j1"),
    ]:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": USER}):
            r = api.request(method, path, headers=headers, json={})
            assert r.status_code == 401, (method, path, headers, r.text)
            assert r.json()["detail"]["error"] == "unauthorized"
    assert api.get("/jobs", headers=BEARER).status_code == 200
    health = api.get("/health")
    assert health.status_code == 200 and health.json()["auth"] == "bearer"
    assert health.json()["database"] == "sqlite"
    assert str(warehouse) not in health.text and "://" not in health.text


def test_only_the_tables_flusher_reports_its_barriers(api: TestClient) -> None:
    r = api.post(
        "/jobs",
        headers=BEARER,
        json={"job_id": "w1", "kind": "worker", "sinks": ["db.t"], "role": "flusher"},
    )
    assert r.status_code == 201, r.text
    # leaving out job_id no longer slips past the running flusher
    r = api.post("/tables/db.t/barriers", headers=BEARER, json={"barrier": 5})
    assert r.status_code == 403 and r.json()["detail"]["job_id"] == "w1", r.text
    r = api.post("/barriers", headers=BEARER, json=[{"table": "db.t", "barrier": 5}])
    assert r.status_code == 403, r.text
    api.post("/jobs", headers=BEARER, json={"job_id": "x", "kind": "worker", "sinks": ["db.u"]})
    r = api.post("/tables/db.t/barriers", headers=BEARER, json={"barrier": 5, "job_id": "x"})
    assert r.status_code == 409 and r.json()["detail"]["error"] == "writer_conflict"
    r = api.post("/tables/db.t/barriers", headers=BEARER, json={"barrier": 5, "job_id": "w1"})
    assert r.status_code == 200, r.text
    # the admin (dts meta rebuild) may report for any table
    r = api.post("/barriers", headers=AS_ADMIN, json=[{"table": "db.t", "barrier": 6}])
    assert r.status_code == 200, r.text
    assert [b["barrier"] for b in api.get("/tables/db.t/barriers", headers=BEARER).json()] == [
        6,
        5,
    ]


def test_ending_or_deleting_another_job_needs_the_admin_token(api: TestClient) -> None:
    for job in ("mine", "theirs"):
        r = api.post(
            "/jobs",
            headers=BEARER,
            json={"job_id": job, "kind": "worker", "sinks": [f"db.{job}"], "role": "flusher"},
        )
        assert r.status_code == 201, r.text
    cancel = {"state": "cancelled", "reason": "probe"}
    r = api.post("/jobs/theirs/finish", headers=BEARER, json=cancel)
    assert r.status_code == 403 and ADMIN_TOKEN_ENV in r.json()["detail"]["message"]
    r = api.post("/jobs/theirs/finish", headers={**BEARER, JOB_HEADER: "mine"}, json=cancel)
    assert r.status_code == 403
    assert api.post("/jobs/theirs/heartbeat", headers=BEARER).status_code == 403
    assert api.get("/jobs/theirs", headers=BEARER).json()["state"] == "running"
    # a job ends itself; the admin ends anyone's
    r = api.post("/jobs/mine/finish", headers={**BEARER, JOB_HEADER: "mine"}, json={})
    assert r.status_code == 200 and r.json()["state"] == "finished"
    r = api.post("/jobs/theirs/finish", headers=AS_ADMIN, json=cancel)
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    assert api.delete("/jobs/theirs", headers=BEARER).status_code == 403
    assert api.delete("/jobs/theirs", headers=AS_ADMIN).status_code == 204
    assert api.delete("/jobs/mine", headers={**BEARER, JOB_HEADER: "mine"}).status_code == 204


def test_clients_take_their_tokens_from_the_environment(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.for_warehouse(warehouse, heartbeat_timeout_ms=60_000)
    try:
        with RunningServer(store, auth=MetaAuth(USER, ADMIN)) as running:
            monkeypatch.delenv(TOKEN_ENV, raising=False)
            monkeypatch.delenv(ADMIN_TOKEN_ENV, raising=False)
            with MetaClient(running.url) as anonymous, pytest.raises(Unauthorized):
                anonymous.list_jobs()
            monkeypatch.setenv(TOKEN_ENV, USER)
            monkeypatch.setenv(ADMIN_TOKEN_ENV, ADMIN)
            with MetaClient(running.url) as c:
                with c.running_job("worker", sinks=["db.t"], job_id="j", role="flusher") as h:
                    h.report_barrier("db.t", 7, 1)  # heartbeats and reports as itself
                    with pytest.raises(Forbidden):
                        c.report_barrier("db.t", 8, 2)  # anonymous, beside the flusher
                    c.register_job("worker", sinks=["db.other"], job_id="other")
                    with pytest.raises(WriterConflict):
                        c.report_barrier("db.t", 8, 2, job_id="other")
                    with pytest.raises(Forbidden):
                        c.finish_job("j", "cancelled")  # not as the job, not admin
                assert c.get_job("j").state.value == "finished"
            with MetaClient(running.url, admin=True) as op:
                op.register_job("worker", sinks=["db.u"], job_id="k")
                op.finish_job("other", "cancelled")
                assert op.finish_job("k", "cancelled").state.value == "cancelled"
                op.forget_job("k")
    finally:
        store.close()
