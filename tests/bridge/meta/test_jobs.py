"""Jobs: registration, refusals that name the cycle / the writer, heartbeat timeout, finish."""

from __future__ import annotations

import time
from typing import Any

import pytest

from bridge.meta.client import MetaClient
from bridge.meta.errors import (
    CycleError,
    JobAlreadyExists,
    JobNotFound,
    JobNotRunning,
    WriterConflict,
)
from bridge.meta.models import JobKind, JobSpec, JobState
from bridge.meta.store import Store

FakeClock = Any  # tests/bridge/meta/conftest.py: FakeClock (callable, .advance(ms))


def _spec(
    job_id: str, sources: list[str], sinks: list[str], kind: str = "spark-streaming"
) -> JobSpec:
    return JobSpec(job_id=job_id, kind=JobKind(kind), sources=sources, sinks=sinks)


def test_register_list_show_over_http(client: MetaClient) -> None:
    job = client.register_job("worker", [], ["db.t0"], job_id="w0")
    assert job.state is JobState.RUNNING and job.sinks == ["db.t0"] and job.sources == []
    client.register_job("spark-streaming", ["db.t0"], ["db.t1", "t2"], job_id="s1")
    jobs = {j.job_id: j for j in client.list_jobs()}
    assert set(jobs) == {"w0", "s1"}
    assert jobs["s1"].sinks == ["db.t1", "default.t2"]  # unqualified names land in `default`
    assert client.get_job("s1").kind is JobKind.SPARK_STREAMING
    generated = client.register_job("ctas", ["db.t1"], ["db.t9"])
    assert generated.job_id.startswith("ctas-")
    with pytest.raises(JobNotFound):
        client.get_job("nope")


def test_cycle_refused_naming_the_path(client: MetaClient) -> None:
    client.register_job("spark-streaming", ["db.t0"], ["db.t1"], job_id="s1")
    client.register_job("spark-streaming", ["db.t1"], ["db.t2"], job_id="s2")
    client.register_job("spark-streaming", ["db.t2"], ["db.t3", "db.t4"], job_id="s3")  # no cycle
    with pytest.raises(CycleError) as err:
        client.register_job("spark-batch", ["db.x", "db.t3"], ["db.t0"], job_id="bad")
    assert err.value.details["path"] == ["db.t3", "db.t0", "db.t1", "db.t2", "db.t3"]
    assert "db.t3 -> db.t0 -> db.t1 -> db.t2 -> db.t3" in err.value.message
    with pytest.raises(JobNotFound):
        client.get_job("bad")  # refused means nothing was kept
    with pytest.raises(CycleError, match=r"read and write db\.t5"):
        client.register_job("spark-batch", ["db.t5"], ["db.t5"], job_id="self")
    # the lineage of a finished job still counts: data in t1 came from t0
    client.finish_job("s1")
    with pytest.raises(CycleError):
        client.register_job("spark-batch", ["db.t4"], ["db.t0"], job_id="bad2")
    assert {j.job_id for j in client.list_jobs()} == {"s1", "s2", "s3"}


def test_second_writer_refused_naming_the_job(client: MetaClient) -> None:
    client.register_job("worker", [], ["db.orders"], job_id="w-orders")
    with pytest.raises(WriterConflict) as err:
        client.register_job("spark-batch", ["db.x"], ["db.y", "db.orders"], job_id="batch-1")
    assert err.value.details["job_id"] == "w-orders"
    assert err.value.details["table"] == "db.orders"
    assert "job w-orders" in err.value.message
    # nothing of the refused job was kept
    with pytest.raises(JobNotFound):
        client.get_job("batch-1")
    assert client.table("db.orders").writer_job_id == "w-orders"
    # finishing the writer frees the table; its lineage stays
    client.finish_job("w-orders", "finished")
    job = client.register_job("spark-batch", ["db.x"], ["db.y", "db.orders"], job_id="batch-1")
    assert job.state is JobState.RUNNING
    assert client.table("db.orders").writer_job_id == "batch-1"


def test_reregister_same_id(client: MetaClient) -> None:
    first = client.register_job("worker", ["db.a"], ["db.b"], job_id="w")
    again = client.register_job("worker", ["db.a"], ["db.b"], job_id="w")  # process restart
    assert again.registered_at_ms == first.registered_at_ms
    with pytest.raises(JobAlreadyExists):
        client.register_job("worker", ["db.a"], ["db.c"], job_id="w")
    client.finish_job("w", "failed", "crashed")
    rerun = client.register_job("worker", ["db.a"], ["db.c"], job_id="w")  # a new run
    assert rerun.state is JobState.RUNNING and rerun.sinks == ["db.c"]


def test_heartbeat_timeout_marks_failed_and_frees_the_table(client: MetaClient) -> None:
    """The server fixture: heartbeat timeout 1 s, sweeper every 0.1 s, a real clock. The
    beating job has its own 60 s timeout: on a busy machine two beats 0.2 s apart were once
    1.2 s apart (load 15), and a beat keeping a job alive is the fake clock's test below."""
    alive = client.register_job(
        "worker", [], ["db.alive"], job_id="alive", heartbeat_timeout_ms=60_000
    )
    dead = client.register_job("worker", [], ["db.dead"], job_id="dead")  # "killed": never beats
    assert dead.heartbeat_timeout_ms == 1_000  # the server's default
    deadline = time.monotonic() + 10
    while client.get_job("dead").state is JobState.RUNNING:
        client.heartbeat("alive")
        assert time.monotonic() < deadline, "the dead job was never marked failed"
        time.sleep(0.2)
    dead = client.get_job("dead")
    assert dead.state is JobState.FAILED
    assert "heartbeat timeout" in dead.reason
    assert client.get_job("alive").state is JobState.RUNNING
    assert alive.heartbeat_timeout_ms == 60_000
    # a zombie that wakes up is told so, and may not report barriers
    with pytest.raises(JobNotRunning, match="heartbeat timeout"):
        client.heartbeat("dead")
    with pytest.raises(JobNotRunning):
        client.report_barrier("db.dead", 5, 1, job_id="dead")
    # the table is free for a new writer
    assert client.register_job("worker", [], ["db.dead"], job_id="dead-2").state is JobState.RUNNING


def test_running_job_context_heartbeats_and_finishes(client: MetaClient) -> None:
    with client.running_job("spark-streaming", ["db.s"], ["db.k"], heartbeat_interval_s=0.2) as h:
        time.sleep(1.5)  # longer than the 1 s timeout: only the heartbeats keep it alive
        assert client.get_job(h.job_id).state is JobState.RUNNING
        h.report_barrier("db.k", 100, 1)
    assert client.get_job(h.job_id).state is JobState.FINISHED
    with pytest.raises(RuntimeError), client.running_job("worker", [], ["db.k"]) as h2:
        raise RuntimeError("boom")
    failed = client.get_job(h2.job_id)
    assert failed.state is JobState.FAILED and "boom" in failed.reason


def test_timeout_with_a_fake_clock(store: Store, clock: FakeClock) -> None:
    store.register_job(_spec("a", [], ["db.a"], "worker"))
    store.register_job(
        JobSpec(job_id="b", kind=JobKind.WORKER, sinks=["db.b"], heartbeat_timeout_ms=60_000)
    )
    clock.advance(9_000)
    assert store.sweep() == []
    store.heartbeat("a")
    clock.advance(9_000)
    assert store.sweep() == []
    clock.advance(1_001)
    assert store.sweep() == ["a"]  # b has its own, longer timeout
    assert store.get_job("a").state is JobState.FAILED
    assert store.get_job("b").state is JobState.RUNNING
    # a registration sweeps first: a dead writer never blocks its successor
    clock.advance(60_000)
    assert store.register_job(_spec("b2", [], ["db.b"], "worker")).state is JobState.RUNNING
    assert store.get_job("b").state is JobState.FAILED


def test_finish_is_idempotent_and_forget_removes_lineage(store: Store) -> None:
    store.register_job(_spec("a", ["db.x"], ["db.y"]))
    store.end_job("a", JobState.FINISHED)
    assert store.end_job("a", JobState.FINISHED).state is JobState.FINISHED
    with pytest.raises(JobNotRunning):
        store.end_job("a", JobState.FAILED)
    assert [(e.source, e.sink, e.job_state) for e in store.edges()] == [
        ("db.x", "db.y", JobState.FINISHED)
    ]
    store.forget_job("a")
    assert store.edges() == []
    store.register_job(_spec("b", ["db.x"], ["db.y"]))
    with pytest.raises(JobNotRunning, match="running"):
        store.forget_job("b")
