"""Two `dts worker` processes sharing one warehouse on S3, as on two machines (issue 26).

moto's S3 server (a process on 127.0.0.1) holds the warehouse, ``s3://dts/wh``; the
workers reach it as they would AWS, by the URI and the AWS_* variables. Two tables
written with the same barrier ids (one of four log partitions, one of two) are consumed
by a group of `dts worker` processes reporting to a MetaService. The first worker runs
alone; a second joins, and the moment the group's new assignment reaches it the first
one, which held every bucket and the committers, is SIGKILLed: the buckets move twice
while barriers are prepared and committed, and whatever the killed worker left half done
on S3 (prepared records, uncommitted files) must neither be lost nor count twice. At the
end, on S3: every barrier of both tables has one snapshot equal to the oracle; consistent
reads of the two tables, from the snapshots and through the MetaService, equal the oracle
at the barrier they name; orphan cleanup removes the killed worker's leftovers and the
reads stay right.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.consistency_read import consistent_read_tables
from bridge.meta.client import MetaClient
from bridge.meta.errors import MetaError
from filestore import Catalog, Table
from tests.bridge.worker.support import (
    SCHEMA,
    BackgroundProducer,
    Changelog,
    WorkerProc,
    assert_all_barriers_match,
    commit_latency,
    latest_barrier,
    log_writer,
    rows_at,
    start_meta,
    start_worker,
    wait_for,
    wait_for_catch_up,
)
from tests.s3 import CREDENTIALS, MotoS3, start_moto

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

pytest.importorskip("moto.server", reason="moto[server] is a dev dependency")

# between barriers: a barrier costs a worker alone ~2 s on moto (six buckets prepared and
# two commits, each a few dozen S3 requests), and 5 s with the suite's slow tests beside it
# (each table's commit 2-2.5 s, one table after the other); the writer must not outrun it
PAUSE_S = 6.0
# how often the test looks at both tables: a look is a dozen requests to moto, which serves
# the workers too, one request at a time (at 0.1 s the test's own looks slowed the workers'
# commits past its waits in CI)
POLL_S = 0.5


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3]:
    server = start_moto(tmp_path_factory.mktemp("moto"))
    try:
        yield server
    finally:
        server.stop()


def _create(warehouse: str, buckets: int) -> Table:
    name = f"db.t_{uuid.uuid4().hex[:10]}"
    return Catalog(warehouse).create_table(
        name, SCHEMA, primary_key=["id"], options={"bucket": str(buckets)}
    )


def _consistent_read_is_right(
    catalog: Catalog, tables: list[Table], logs: list[Changelog], meta_url: str | None
) -> int:
    """Read ``tables`` at their consistent barrier; each must equal its oracle there.
    Returns the barrier."""
    names = [t.name for t in tables]
    frames = consistent_read_tables(catalog, names, meta_url=meta_url, columns=["id", "v", "n"])
    barrier = frames.version.barrier
    assert barrier is not None
    for t, log in zip(tables, logs, strict=True):
        got = frames[t.name]
        rows = sorted(zip(*(got.column(c).to_pylist() for c in ("id", "v", "n")), strict=True))
        assert rows == log.expected(barrier), f"{t.name} read consistently at {barrier}"
    return barrier


# its own waits add up to over 9 minutes; 100-250 s with the other core busy, past the
# suite's 300 s once with more load beside it
@pytest.mark.timeout(600)
def test_two_workers_on_s3_one_killed_during_a_rebalance(  # type: ignore[no-untyped-def]
    broker, s3: MotoS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)  # this process and the workers it starts
    warehouse = s3.warehouse("dts", f"wh-{uuid.uuid4().hex[:6]}")
    catalog = Catalog(warehouse)
    orders, events = _create(warehouse, 4), _create(warehouse, 2)
    logs = [Changelog(seed=261), Changelog(seed=262)]
    writers = [log_writer(orders, broker.bootstrap), log_writer(events, broker.bootstrap)]
    names = [orders.name, events.name]
    group = f"g-{uuid.uuid4().hex[:8]}"
    meta = start_meta(tmp_path)
    figures: dict[str, float] = {}
    workers: list[WorkerProc] = []

    def worker() -> WorkerProc:
        w = start_worker(
            warehouse,
            broker.bootstrap,
            names,
            group,
            tmp_path,
            extra_args=["--meta-url", meta.url],
        )
        workers.append(w)
        return w

    def note(what: str, seconds: float) -> None:
        figures[what] = seconds
        print(f"{what}: {seconds:.1f}s", flush=True)  # shown even if a later step fails

    committed = lambda: min(latest_barrier(t) or 0 for t in (orders, events))  # noqa: E731
    try:
        with BackgroundProducer(
            writers[0], logs[0], rows=20, pause_s=PAUSE_S, followers=[(writers[1], logs[1])]
        ) as producer:
            a = worker()
            wait_for(lambda: committed() > 0, 90, "the first commits on S3", a, POLL_S)
            note("one worker", commit_latency(producer, committed, 60, a, POLL_S))

            b = worker()  # joins: the group rebalances
            wait_for(lambda: bool(b.owned_buckets(orders.name)), 60, "the new assignment", b)
            written, killed = producer.barriers[-1], time.monotonic()
            a.stop(signal.SIGKILL)  # mid-rebalance: b has its buckets, a still has work
            wait_for(
                lambda: (
                    b.owned_buckets(orders.name) == {0, 1, 2, 3}
                    and b.owned_buckets(events.name) == {0, 1}
                ),
                60,
                "the killed worker's buckets moved",
                b,
            )
            wait_for(lambda: committed() > written, 180, "a barrier after the kill", b, POLL_S)
            note("stall after the kill", time.monotonic() - killed)
            _consistent_read_is_right(catalog, [orders, events], logs, None)
            barriers = producer.stop()
        caught_up = time.monotonic()
        wait_for_catch_up(committed, barriers[-1], 120, "every barrier committed", b, POLL_S)
        note("the last barrier committed after the writer stopped", time.monotonic() - caught_up)
        wait_for(
            lambda: _meta_barrier(meta.url, names) == barriers[-1],
            60,
            "the MetaService at the last barrier",
            b,
        )
        through_meta = _consistent_read_is_right(catalog, [orders, events], logs, meta.url)
    finally:
        try:
            codes = _stop_all(workers)
        finally:  # the MetaService too when a worker had to be killed
            for writer in writers:
                writer.close(final_barrier=False)
            meta_log = meta.log_path.read_text(errors="replace")
            meta.stop()
    print(
        ", ".join(f"{k} {v:.1f}s" for k, v in figures.items())
        + f"; {len(barriers)} barriers on S3",
        flush=True,
    )
    assert codes == [-signal.SIGKILL, 0], "\n\n".join(w.tail() for w in workers)
    for w in workers[1:]:
        assert "Traceback" not in w.output(), w.tail()
    for table, log in zip((orders, events), logs, strict=True):
        assert_all_barriers_match(table, log, barriers)
    assert _consistent_read_is_right(catalog, [orders, events], logs, None) == barriers[-1]
    assert through_meta == barriers[-1]
    # what the killed worker left behind (files of prepared, never committed barriers)
    # goes, and nothing any snapshot needs does
    for table, log in zip((orders, events), logs, strict=True):
        table.remove_orphans(older_than_ms=0)
        for barrier in (barriers[0], barriers[len(barriers) // 2], barriers[-1]):
            assert rows_at(table, barrier) == log.expected(barrier), f"{table.name} at {barrier}"
    assert "Traceback" not in meta_log, meta_log[-3000:]


def _meta_barrier(url: str, tables: list[str]) -> int | None:
    try:
        with MetaClient(url, timeout_s=2) as client:
            return client.consistent_version(tables).barrier
    except MetaError:
        return None


def _stop_all(workers: list[WorkerProc]) -> list[int]:
    """Stop every worker (Ctrl-C's way, SIGTERM), each one even if another would not."""
    codes, failures = [], []
    for w in workers:
        try:
            codes.append(w.stop())
        except AssertionError as exc:  # killed after its timeout
            failures.append(str(exc))
    assert not failures, "\n\n".join(failures)
    return codes
