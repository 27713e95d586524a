"""Several MetaService instances on one database behave as one: registrations racing from
two instances never both pass a check (no double writer, no cycle), on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bridge.meta.client import MetaClient
from bridge.meta.errors import CycleError, WriterConflict
from bridge.meta.models import JobKind, JobSpec, JobState, TableBarrierReport
from bridge.meta.store import Store
from tests.bridge.support import RunningServer


def _race(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run ``calls`` at the same moment on their own threads; results or exceptions."""
    start = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = calls[i]()
        except Exception as e:
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def _two_instances(url: str) -> Iterator[tuple[Store, Store]]:
    a, b = Store(url), Store(url)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def instances(request: pytest.FixtureRequest, warehouse: Path) -> Iterator[tuple[Store, Store]]:
    if request.param == "sqlite":
        url = f"sqlite:///{warehouse / '_meta' / 'meta.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
        engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
        with engine.begin() as conn:  # a fresh schema per test
            conn.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
        engine.dispose()
    yield from _two_instances(url)


def test_racing_writers_one_wins(instances: tuple[Store, Store]) -> None:
    a, b = instances
    for i in range(8):
        table = f"db.r{i}"
        results = _race(
            [
                lambda i=i, t=table: a.register_job(
                    JobSpec(job_id=f"a{i}", kind=JobKind.WORKER, sinks=[t])
                ),
                lambda i=i, t=table: b.register_job(
                    JobSpec(job_id=f"b{i}", kind=JobKind.WORKER, sinks=[t])
                ),
            ]
        )
        wins = [r for r in results if not isinstance(r, Exception)]
        losses = [r for r in results if isinstance(r, Exception)]
        assert len(wins) == 1 and len(losses) == 1, results
        assert isinstance(losses[0], WriterConflict)
        assert losses[0].details["job_id"] == wins[0].job_id
        assert a.table(table).writer_job_id == wins[0].job_id == b.table(table).writer_job_id


def test_racing_cycle_halves_one_wins(instances: tuple[Store, Store]) -> None:
    a, b = instances
    for i in range(8):
        p, q = f"db.p{i}", f"db.q{i}"
        results = _race(
            [
                lambda i=i, p=p, q=q: a.register_job(
                    JobSpec(job_id=f"pq{i}", kind=JobKind.SPARK_STREAMING, sources=[p], sinks=[q])
                ),
                lambda i=i, p=p, q=q: b.register_job(
                    JobSpec(job_id=f"qp{i}", kind=JobKind.SPARK_STREAMING, sources=[q], sinks=[p])
                ),
            ]
        )
        errors = [r for r in results if isinstance(r, Exception)]
        assert len(errors) == 1 and isinstance(errors[0], CycleError), results
    assert len(a.list_jobs(JobState.RUNNING)) == 8 == len(b.list_jobs(JobState.RUNNING))


def test_no_lost_registration_or_report(instances: tuple[Store, Store]) -> None:
    a, b = instances
    calls: list[Callable[[], Any]] = []
    for i in range(10):
        store = a if i % 2 else b
        calls.append(
            lambda s=store, i=i: s.register_job(
                JobSpec(job_id=f"j{i}", kind=JobKind.WORKER, sources=["db.src"], sinks=[f"db.o{i}"])
            )
        )
        calls.append(
            lambda s=store, i=i: s.report_barriers(
                [TableBarrierReport(table="db.src", barrier=1000 * i, snapshot_id=i)]
            )
        )
    results = _race(calls)
    assert not [r for r in results if isinstance(r, Exception)], results
    assert len(b.list_jobs()) == 10
    assert len(a.barriers("db.src", limit=100)) == 10


def test_two_http_instances_on_one_sqlite_file(warehouse: Path) -> None:

    url = f"sqlite:///{warehouse / '_meta' / 'meta.db'}"
    sa_, sb = Store(url), Store(url)
    try:
        with RunningServer(sa_) as one, RunningServer(sb) as two:
            c1, c2 = MetaClient(one.url), MetaClient(two.url)
            c1.register_job("worker", [], ["db.t"], job_id="w1")
            with pytest.raises(WriterConflict, match="job w1"):
                c2.register_job("worker", [], ["db.t"], job_id="w2")
            c2.report_barrier("db.t", 1000, 1, job_id="w1")
            assert c1.consistent_version(["db.t"]).barrier == 1000
            c2.finish_job("w1")
            assert c1.get_job("w1").state is JobState.FINISHED
            c1.close()
            c2.close()
    finally:
        sa_.close()
        sb.close()
