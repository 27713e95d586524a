"""Exactly once under crashes and rebalances (real broker, real FileStore, `dts worker` processes)."""

from __future__ import annotations

import random
import signal
import time
import uuid
from pathlib import Path

import pytest

from bridge.worker.config import WorkerConfig
from tests.bridge.worker.support import (
    BackgroundProducer,
    Changelog,
    WorkerProc,
    assert_all_barriers_match,
    commit_latency,
    create_table,
    latest_barrier,
    log_writer,
    start_worker,
    wait_for,
    wait_for_catch_up,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_sigkill_at_crash_points_then_clean_run(broker, warehouse: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = create_table(warehouse)
    log = Changelog(seed=7)
    writer = log_writer(table, broker.bootstrap)
    group = f"g-{uuid.uuid4().hex[:8]}"
    rng = random.Random(7)
    # deterministic crash points, then SIGKILLs at random moments
    crashes: list[dict[str, str] | float] = [
        {"DTS_WORKER_CRASH_AT": "prepared:3"},
        {"DTS_WORKER_CRASH_AT": "committing:2"},
        {"DTS_WORKER_CRASH_AT": "batch:4"},
        {"DTS_WORKER_CRASH_AT": "committed:1"},
        rng.uniform(0.5, 2.5),
    ]
    with BackgroundProducer(writer, log, rows=150, pause_s=0.5) as producer:
        for crash in crashes:
            t0 = time.monotonic()
            env = crash if isinstance(crash, dict) else None
            w = start_worker(warehouse, broker.bootstrap, [table.name], group, tmp_path, env=env)
            if env is not None:
                code = w.proc.wait(timeout=60)
                assert code == -signal.SIGKILL, w.tail()
            else:
                before = latest_barrier(table)
                wait_for(lambda b=before: latest_barrier(table) != b, 60, "progress", w)
                time.sleep(float(crash))
                assert w.stop(signal.SIGKILL) == -signal.SIGKILL
            print(f"crash {crash}: {time.monotonic() - t0:.1f}s", flush=True)
        barriers = producer.stop()
    writer.close(final_barrier=False)
    assert len(barriers) > 10
    t0 = time.monotonic()
    w = start_worker(warehouse, broker.bootstrap, [table.name], group, tmp_path)
    try:
        # the killed workers may have committed everything already: wait for this one to
        # have started, resumed and seen the last barrier committed
        wait_for(
            lambda: w.table_status(table.name).get("last_barrier_committed") == barriers[-1],
            90,
            "the clean run",
            w,
        )
        print(f"clean run: {time.monotonic() - t0:.1f}s, {len(barriers)} barriers", flush=True)
    finally:
        code = w.stop()
    assert code == 0, w.tail()
    assert_all_barriers_match(table, log, barriers)


def test_two_workers_then_one_removed(broker, warehouse: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = create_table(warehouse)
    log = Changelog(seed=11)
    writer = log_writer(table, broker.bootstrap)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with BackgroundProducer(writer, log, rows=150, pause_s=0.5) as producer:
        a = start_worker(warehouse, broker.bootstrap, [table.name], group, tmp_path)
        b = start_worker(warehouse, broker.bootstrap, [table.name], group, tmp_path)
        try:
            wait_for(
                lambda: len(producer.barriers) > 3 and latest_barrier(table) is not None,
                60,
                "start",
                a,
            )
            # both members of the group hold buckets, together all of them
            wait_for(
                lambda: (
                    a.owned_buckets(table.name)
                    and b.owned_buckets(table.name)
                    and a.owned_buckets(table.name) | b.owned_buckets(table.name) == {0, 1, 2, 3}
                ),
                60,
                "the buckets shared by two workers",
                b,
            )
            # a few commits by the two (an event each, not a pause: the other core may be busy)
            for _ in range(3):
                seen = latest_barrier(table)
                wait_for(lambda s=seen: latest_barrier(table) != s, 60, "two workers committing", b)
            # removed mid-run (Ctrl-C): a takes its buckets over
            assert b.stop(signal.SIGINT) == 0, b.tail()
            wait_for(
                lambda: a.owned_buckets(table.name) == {0, 1, 2, 3},
                60,
                "a owning all buckets",
                a,
            )
            mid = latest_barrier(table)
            wait_for(lambda: latest_barrier(table) != mid, 60, "one worker committing", a)
            barriers = producer.stop()
            wait_for(lambda: latest_barrier(table) == barriers[-1], 60, "all barriers", a)
        finally:
            b.stop()
            code = a.stop()
    writer.close(final_barrier=False)
    assert code == 0, a.tail()
    assert_all_barriers_match(table, log, barriers)


def test_taking_buckets_slower_than_faust_waits_for_a_seek(  # type: ignore[no-untyped-def]
    broker, warehouse: Path, tmp_path: Path
) -> None:
    """Taking a table's buckets (discarding old prepared records, reading the resume
    snapshot, waiting for a batch under way) can take longer than Faust waits for a seek,
    its request timeout: on S3 it did. Faust's recovery service then stopped for good, and
    after the next rebalance the worker owned nothing while its group thought it did; the
    table's commits stopped. Here a worker's second take of its buckets (when a second
    worker joins) is made slower than that; once the second worker leaves, the first must
    own every bucket and commit every barrier."""
    table = create_table(warehouse)
    log = Changelog(seed=13)
    writer = log_writer(table, broker.bootstrap)
    group = f"g-{uuid.uuid4().hex[:8]}"
    # start_worker's --session-timeout 3; Faust waits for a seek its request timeout
    pause_s = WorkerConfig("", "", session_timeout_s=3.0).request_timeout_s + 5
    committed = lambda: latest_barrier(table)  # noqa: E731
    with BackgroundProducer(writer, log, rows=100, pause_s=0.3) as producer:
        env = {"DTS_WORKER_PAUSE_AT": f"assigning:2:{pause_s}"}
        a = start_worker(warehouse, broker.bootstrap, [table.name], group, tmp_path, env=env)
        b: WorkerProc | None = None
        try:
            wait_for(lambda: committed() is not None, 60, "a's first commit", a)
            b = start_worker(warehouse, broker.bootstrap, [table.name], group, tmp_path)
            wait_for(lambda: "fault injection: pausing" in a.output(), 60, "a's slow take", a)
            wait_for(
                lambda: (
                    bool(a.owned_buckets(table.name))
                    and a.owned_buckets(table.name) | b.owned_buckets(table.name) == {0, 1, 2, 3}
                ),
                60,
                "the buckets shared once a's take ended",
                a,
            )
            assert b.stop(signal.SIGINT) == 0, b.tail()
            wait_for(lambda: a.owned_buckets(table.name) == {0, 1, 2, 3}, 60, "a alone", a)
            latency = commit_latency(producer, committed, 60, a)
            barriers = producer.stop()
            wait_for_catch_up(committed, barriers[-1], 60, "every barrier", a)
        finally:
            try:
                if b is not None:
                    b.stop()
            finally:
                code = a.stop()
    writer.close(final_barrier=False)
    print(f"a took its buckets in {pause_s:g}s; alone again, a barrier in {latency:.1f}s")
    assert code == 0, a.tail()
    assert_all_barriers_match(table, log, barriers)
