"""The worker's signal while its Kafka log is unreachable: one warning, reminders, the
gauge and /status; the fetch thread's probe against an address nobody listens on; the
Kafka client's repeated lines limited to one a minute."""

from __future__ import annotations

import logging
import threading

import pytest
from confluent_kafka import KafkaError

from bridge.worker.fetch import LogFetcher
from bridge.worker.log_repeats import RepeatLimiter
from bridge.worker.metrics import WorkerMetrics
from bridge.worker.reachability import LogReachability
from bridge.worker.state.status import LogLinkStatus, WorkerStatus
from logstore.localhost import free_port


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _gauge(metrics: WorkerMetrics) -> float:
    return float(metrics.log_reachable.labels("g")._value.get())


def test_one_warning_per_outage_reminders_and_the_gauge(caplog: pytest.LogCaptureFixture) -> None:
    metrics, status, clock = WorkerMetrics("g"), WorkerStatus("g"), Clock()
    link = LogReachability(
        "k:9092", metrics, status.log, remind_every_s=30, clock=clock, wall_ms=lambda: 5_000
    )
    assert link.reachable and _gauge(metrics) == 1.0
    link.reached()  # already reachable: nothing said
    caplog.set_level(logging.WARNING, logger="bridge.worker.reachability")

    link.unreachable("Connection refused")
    clock.now += 10
    link.unreachable("Connection refused")  # within the reminder interval: quiet
    assert _gauge(metrics) == 0.0 and not link.reachable
    j = status.to_json()["log"]
    assert j["reachable"] is False and j["unreachable_since_ms"] == 5_000
    assert j["last_error"] == "Connection refused" and j["outages"] == 1
    clock.now += 25
    link.unreachable("Timed out")  # 35 s down: reminded
    clock.now += 2.5
    link.reached()
    link.reached()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3, messages
    assert "k:9092 is unreachable (Connection refused)" in messages[0]
    assert "still unreachable after 35 s (Timed out)" in messages[1]
    assert "answers again after 37.5 s" in messages[2]
    assert _gauge(metrics) == 1.0
    assert status.log.to_json()["reachable"] is True and status.log.unreachable_since_ms is None

    link.unreachable("Connection refused")  # a second outage counts again
    assert status.log.outages == 2
    assert metrics.log_outages.labels("g")._value.get() == 2


class Recorder:
    def __init__(self) -> None:
        self.errors: list[str] = []
        self.told = threading.Event()

    def unreachable(self, error: str) -> None:
        self.errors.append(error)
        self.told.set()

    def reached(self) -> None:
        raise AssertionError("nothing listens: no broker can have answered")


def test_fetcher_reports_a_log_nobody_answers_for() -> None:
    link = Recorder()
    fetcher = LogFetcher(f"127.0.0.1:{free_port()}", link=link)
    fetcher.start()
    try:
        fetcher.assign("db.t", {0: 0, 1: 0}, fetcher.new_epoch())
        assert link.told.wait(30), "the fetch thread never reported the log unreachable"
    finally:
        fetcher.stop()
    assert fetcher.error is None  # an outage is no failure: the worker goes on
    assert link.errors[0]


def test_status_of_a_reachable_log() -> None:
    assert LogLinkStatus().to_json(now_ms=1) == {
        "reachable": True,
        "unreachable_since_ms": None,
        "unreachable_for_s": None,
        "last_error": None,
        "outages": 0,
    }


def test_repeated_client_lines_once_a_minute_with_a_count() -> None:
    clock = Clock()
    limiter = RepeatLimiter(window_s=60, clock=clock)

    def record(msg: str, *args: object, level: int = logging.ERROR) -> logging.LogRecord:
        return logging.LogRecord("aiokafka", level, __file__, 1, msg, args, None)

    refused = "[Errno 111] Connect call failed ('127.0.0.1', {})"
    first = record("Unable connect to node with id %s: %s", 1, refused.format(9092))
    assert limiter.filter(first)
    for node, port in ((1, 9092), (2, 9093)):  # the same condition, other numbers: hidden
        clock.now += 1
        hidden = record("Unable connect to node with id %s: %s", node, refused.format(port))
        assert not limiter.filter(hidden)
    assert limiter.filter(record("Unable to update metadata from [1]"))  # another one
    assert limiter.filter(record("Joined group %s", "g", level=logging.INFO))  # info passes
    assert limiter.filter(record("Joined group %s", "g", level=logging.INFO))
    clock.now += 60
    again = record("Unable connect to node with id %s: %s", 1, refused.format(9092))
    assert limiter.filter(again)
    assert again.getMessage().endswith("(and 2 more like it in 62 s, not shown)")


class _Fetched:
    """A record librdkafka fetched before the outage, handed out after it."""

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return "db.not-assigned"


def test_records_fetched_before_an_outage_do_not_end_it() -> None:
    link = Recorder()  # reached() fails the test
    fetcher = LogFetcher(f"127.0.0.1:{free_port()}", link=link)  # never started
    fetcher._on_client_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "all brokers down"))
    fetcher._deliver([_Fetched()])
    assert fetcher._link_error == "all brokers down"  # the probe still runs and decides
