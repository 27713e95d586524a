"""Sink roles: writer / log-writer / flusher, which of them may share a table, and what
each adds to lineage and barrier reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bridge.meta.client import MetaClient
from bridge.meta.errors import JobAlreadyExists, WriterConflict
from bridge.meta.models import JobKind, JobSpec, JobState, SinkRole, TableBarrierReport
from bridge.meta.store import Store

FakeClock = Any  # tests/bridge/meta/conftest.py: FakeClock (callable, .advance(ms))


def _spec(
    job_id: str,
    role: SinkRole,
    sinks: list[str],
    sources: list[str] | None = None,
    kind: JobKind = JobKind.SPARK_STREAMING,
) -> JobSpec:
    return JobSpec(job_id=job_id, kind=kind, role=role, sources=sources or [], sinks=sinks)


def _flusher(job_id: str, table: str) -> JobSpec:
    return _spec(job_id, SinkRole.FLUSHER, [table], kind=JobKind.WORKER)


def test_default_role_is_writer(store: Store) -> None:
    job = store.register_job(JobSpec(job_id="b", kind=JobKind.SPARK_BATCH, sinks=["db.t"]))
    assert job.role is SinkRole.WRITER
    assert store.table("db.t").writer_job_id == "b" and store.table("db.t").flusher_job_id is None


@pytest.mark.parametrize("flusher_first", [True, False])
def test_log_writer_and_flusher_share_a_table(store: Store, flusher_first: bool) -> None:
    jobs = [_flusher("worker:g:db.t", "db.t"), _spec("s", SinkRole.LOG_WRITER, ["db.t"], ["db.a"])]
    for spec in jobs if flusher_first else jobs[::-1]:
        assert store.register_job(spec).state is JobState.RUNNING
    status = store.table("db.t")
    assert (status.writer_job_id, status.flusher_job_id) == ("s", "worker:g:db.t")


def test_second_flusher_refused_naming_the_job(store: Store) -> None:
    store.register_job(_flusher("worker:g1:db.t", "db.t"))
    with pytest.raises(WriterConflict) as err:
        store.register_job(_flusher("worker:g2:db.t", "db.t"))
    assert err.value.details["job_id"] == "worker:g1:db.t"
    assert err.value.details["role"] == "flusher"
    assert "already has a running flusher: job worker:g1:db.t" in err.value.message
    assert "one worker group" in err.value.message
    # its end frees the slot for the other group
    store.end_job("worker:g1:db.t", JobState.FAILED)
    assert store.register_job(_flusher("worker:g2:db.t", "db.t")).state is JobState.RUNNING
    assert store.table("db.t").flusher_job_id == "worker:g2:db.t"


@pytest.mark.parametrize("second", [SinkRole.LOG_WRITER, SinkRole.WRITER])
def test_second_writer_refused_beside_a_log_writer(store: Store, second: SinkRole) -> None:
    store.register_job(_flusher("w", "db.t"))
    store.register_job(_spec("s1", SinkRole.LOG_WRITER, ["db.t"]))
    with pytest.raises(WriterConflict) as err:
        store.register_job(_spec("s2", second, ["db.t"]))
    # the writer slot is named first (the conflict a second log writer actually hits)
    assert err.value.details["job_id"] == "s1"
    assert "already has a running writer: job s1" in err.value.message
    assert "at most one running writer" in err.value.message


@pytest.mark.parametrize("flusher_first", [True, False])
def test_filestore_writer_beside_a_flusher_refused(store: Store, flusher_first: bool) -> None:
    flusher = _flusher("worker:g:db.t", "db.t")
    writer = _spec("batch-1", SinkRole.WRITER, ["db.x", "db.t"], kind=JobKind.SPARK_BATCH)
    first, second = (flusher, writer) if flusher_first else (writer, flusher)
    store.register_job(first)
    with pytest.raises(WriterConflict) as err:
        store.register_job(second)
    assert err.value.details["job_id"] == first.job_id
    assert err.value.details["table"] == "db.t"
    assert f"job {first.job_id}" in err.value.message
    assert "two sources of truth" in err.value.message
    # nothing of the refused job was kept: db.x has no writer
    assert {j.job_id for j in store.list_jobs()} == {first.job_id}


def test_flusher_adds_no_lineage_edges(store: Store) -> None:
    # sources a flusher names are kept on the job, but make no edge and no cycle
    store.register_job(_spec("w", SinkRole.FLUSHER, ["db.t"], ["db.t", "db.x"], JobKind.WORKER))
    assert store.get_job("w").sources == ["db.t", "db.x"]
    assert store.edges() == []
    store.register_job(_spec("s", SinkRole.LOG_WRITER, ["db.t"], ["db.src"]))
    assert [(e.source, e.sink, e.job_id) for e in store.edges()] == [("db.src", "db.t", "s")]
    lineage = store.lineage("db.t")
    assert [n.table for n in lineage.upstream] == ["db.src"] and lineage.downstream == []
    # db.x -> db.t is no edge, so db.t -> db.x closes no cycle
    assert store.register_job(_spec("d", SinkRole.WRITER, ["db.x"], ["db.t"])).sinks == ["db.x"]


def test_reattach_needs_the_same_role(store: Store) -> None:
    store.register_job(_flusher("w", "db.t"))
    assert store.register_job(_flusher("w", "db.t")).role is SinkRole.FLUSHER  # re-attach
    with pytest.raises(JobAlreadyExists, match="already running as flusher"):
        store.register_job(_spec("w", SinkRole.LOG_WRITER, ["db.t"], kind=JobKind.WORKER))


def test_reports_come_from_the_flusher_or_the_writer(store: Store) -> None:
    store.register_job(_flusher("w", "db.t"))
    store.register_job(_spec("s", SinkRole.LOG_WRITER, ["db.t"]))
    store.register_job(_spec("other", SinkRole.WRITER, ["db.u"]))
    for barrier, job in ((1, "w"), (2, "s"), (3, None)):
        store.report_barriers([TableBarrierReport(table="db.t", barrier=barrier, job_id=job)])
    assert [(b.barrier, b.job_id) for b in store.barriers("db.t")] == [
        (3, None),
        (2, "s"),
        (1, "w"),
    ]
    with pytest.raises(WriterConflict) as err:
        store.report_barriers([TableBarrierReport(table="db.t", barrier=4, job_id="other")])
    assert "job s is its writer, job w is its flusher" in err.value.message


def test_trace_names_the_producer_before_the_flusher(store: Store, clock: FakeClock) -> None:
    store.register_job(_flusher("w0", "db.t0"))  # a CDC base table: only a worker flushes it
    store.register_job(_flusher("w1", "db.t1"))
    store.register_job(_spec("s1", SinkRole.LOG_WRITER, ["db.t1"], ["db.t0"]))
    store.report_barriers(
        [TableBarrierReport(table=t, barrier=b) for t, b in (("db.t0", 1000), ("db.t1", 400))]
    )
    clock.advance(0)
    trace = store.trace("db.t1")
    assert trace.origin_table == "db.t1" and trace.origin_job_id == "s1"
    assert store.trace("db.t0").origin_job_id == "w0"


def test_database_from_before_roles_is_upgraded(warehouse: Path) -> None:
    old = Store.for_warehouse(warehouse)
    old.register_job(JobSpec(job_id="legacy", kind=JobKind.WORKER, sinks=["db.t"]))
    with old._write.begin() as conn:  # the schema as it was: no role column
        conn.exec_driver_sql("ALTER TABLE dts_jobs DROP COLUMN role")
        assert "role" not in {c["name"] for c in sa.inspect(conn).get_columns("dts_jobs")}
    old.close()
    store = Store.for_warehouse(warehouse)
    try:
        assert store.get_job("legacy").role is SinkRole.WRITER
        with pytest.raises(WriterConflict, match="two sources of truth"):
            store.register_job(_flusher("worker:g:db.t", "db.t"))
    finally:
        store.close()


def test_roles_over_http(client: MetaClient) -> None:
    worker = client.register_job("worker", [], ["db.t"], job_id="worker:g:db.t", role="flusher")
    assert worker.role is SinkRole.FLUSHER
    spark = client.register_job(
        "spark-streaming", ["db.s"], ["db.t"], job_id="spark-streaming-q1", role="log-writer"
    )
    assert spark.role is SinkRole.LOG_WRITER
    assert {j.job_id: j.role for j in client.list_jobs()} == {
        "worker:g:db.t": SinkRole.FLUSHER,
        "spark-streaming-q1": SinkRole.LOG_WRITER,
    }
    status = client.table("db.t")
    assert (status.writer_job_id, status.flusher_job_id) == ("spark-streaming-q1", "worker:g:db.t")
    with pytest.raises(WriterConflict, match=r"job worker:g:db\.t") as err:
        client.register_job("worker", [], ["db.t"], job_id="worker:g2:db.t", role="flusher")
    assert err.value.details["job_id"] == "worker:g:db.t"
    with pytest.raises(WriterConflict, match="job spark-streaming-q1"):
        client.register_job("spark-streaming", [], ["db.t"], job_id="q2", role="log-writer")
    client.register_job("worker", [], ["db.f"], job_id="worker:g:db.f", role="flusher")
    with pytest.raises(WriterConflict, match=r"job worker:g:db\.f .*two sources of truth"):
        client.register_job("spark-batch", [], ["db.u", "db.f"])


def test_register_with_a_role_from_the_cli(server: Any) -> None:
    from click.testing import CliRunner

    from bridge.cli import cli

    def dts(*args: str) -> Any:
        return CliRunner().invoke(cli, ["meta", "jobs", "register", *args, "--url", server.url])

    worker = dts(
        "--kind", "worker", "--role", "flusher", "--sink", "db.t", "--job-id", "w", "--json"
    )
    assert worker.exit_code == 0, worker.output
    assert json.loads(worker.output)["role"] == "flusher"
    spark = dts("--kind", "spark-streaming", "--role", "log-writer", "--sink", "db.t")
    assert spark.exit_code == 0 and "role=log-writer" in spark.output
    batch = dts("--kind", "spark-batch", "--sink", "db.t")  # --role defaults to writer
    assert (
        batch.exit_code == 1
        and "writer_conflict" in batch.output
        and "writer: job spark-streaming-" in batch.output
    )
    bad = dts("--kind", "worker", "--role", "owner", "--sink", "db.u")
    assert bad.exit_code == 2 and "owner" in bad.output
