"""StallWatch: a table that stops progressing is reported with where and why, and the
report goes away once it moves again (issue 40)."""

from __future__ import annotations

from prometheus_client import generate_latest

from bridge.worker.metrics import WorkerMetrics
from bridge.worker.stalls import StallWatch
from bridge.worker.state.status import TableStatus


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _series(metrics: WorkerMetrics) -> list[str]:
    text = generate_latest(metrics.registry).decode()
    return [line for line in text.splitlines() if line.startswith("dts_worker_table_stall")]


def test_a_failing_stage_is_a_stall_at_once_with_its_positions() -> None:
    metrics, status = WorkerMetrics("job"), TableStatus("db.t", "db.t.log", 2)
    watch = StallWatch(status, metrics)
    assert _series(metrics) == ['dts_worker_table_stalled{job="job",table="db.t"} 0.0']
    watch.failing("commit", OSError(30, "Read-only file system"), {0: 17, 1: -1})
    report = status.to_json()["stalled"]
    assert report["reason"] == "commit: OSError"
    assert "Read-only file system" in report["detail"]
    assert report["partitions"] == [{"partition": 0, "offset": 17}, {"partition": 1, "offset": -1}]
    assert sorted(_series(metrics)) == [
        'dts_worker_table_stall_offset{job="job",partition="0",reason="commit: OSError",'
        'table="db.t"} 17.0',
        'dts_worker_table_stall_offset{job="job",partition="1",reason="commit: OSError",'
        'table="db.t"} -1.0',
        'dts_worker_table_stalled{job="job",table="db.t"} 1.0',
    ]
    watch.clear()
    assert status.to_json()["stalled"] is None
    assert _series(metrics) == ['dts_worker_table_stalled{job="job",table="db.t"} 0.0']


def test_records_waiting_and_nothing_moving_is_a_stall_after_the_stall_time() -> None:
    clock, metrics = Clock(), WorkerMetrics("job")
    status = TableStatus("db.t", "db.t.log", 2)
    watch = StallWatch(status, metrics, stall_after_s=30.0, clock=clock)
    watch.observe({0: 5, 1: 9}, {0: True, 1: False})
    clock.now += 29.0
    watch.observe({0: 5, 1: 9}, {0: True, 1: False})
    assert status.stall is None  # not yet the stall time
    clock.now += 2.0
    watch.observe({0: 5, 1: 9}, {0: True, 1: False})
    assert status.stall is not None and status.stall.reason == "no progress"
    assert status.stall.positions == {0: 5}  # bucket 1 has nothing waiting: caught up
    since = status.stall.since_ms
    clock.now += 10.0
    watch.observe({0: 5, 1: 9}, {0: True, 1: False})
    assert status.stall.since_ms == since  # the same stall, still going on
    watch.observe({0: 6, 1: 9}, {0: True, 1: False})  # bucket 0 moved
    assert status.stall is None
    assert _series(metrics) == ['dts_worker_table_stalled{job="job",table="db.t"} 0.0']


def test_a_slow_bucket_that_keeps_moving_is_not_stalled() -> None:
    clock, status = Clock(), TableStatus("db.t", "db.t.log", 1)
    watch = StallWatch(status, WorkerMetrics("job"), stall_after_s=30.0, clock=clock)
    for pos in range(10):
        watch.observe({0: pos}, {0: True})
        clock.now += 20.0
    assert status.stall is None
