"""The worker's signal while its Kafka log is unreachable: one warning, reminders, the
gauge and /status; the fetch thread's probe against an address nobody listens on; the
Kafka client's repeated lines limited to one a minute."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException

from bridge.worker.fetch import LogFetcher
from bridge.worker.log_repeats import RepeatLimiter
from bridge.worker.metrics import WorkerMetrics
from bridge.worker.reachability import LogReachability
from bridge.worker.state.status import LogLinkStatus, WorkerStatus
from logstore.broker import EmbeddedBroker
from logstore.localhost import free_port
from logstore.spec import LogSpec
from logstore.topics import ensure_topic


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
    def __init__(self, answers_allowed: bool = False) -> None:
        self.errors: list[str] = []
        self.told = threading.Event()
        self.answered = threading.Event()
        self.answers_allowed = answers_allowed

    def unreachable(self, error: str) -> None:
        self.errors.append(error)
        self.told.set()

    def reached(self) -> None:
        if not self.answers_allowed:
            raise AssertionError("nothing listens: no broker can have answered")
        self.answered.set()


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


class _Metadata:
    def __init__(self, brokers: dict[int, str]) -> None:
        self.brokers = brokers


class _ScriptedConsumer:
    """Answers metadata probes as scripted: True answered, False refused."""

    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> _Metadata:
        if self.answers.pop(0):
            return _Metadata({1: "127.0.0.1:9092"})
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Connection refused"))


class Tally:
    def __init__(self) -> None:
        self.down: list[str] = []
        self.up = 0

    def unreachable(self, error: str) -> None:
        self.down.append(error)

    def reached(self) -> None:
        self.up += 1


def test_a_connection_error_is_probed_past_a_probe_that_races_the_shutdown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The broker closes the connection while it stops: the first probe may still be
    answered, librdkafka says nothing more (no "all brokers down" before the consumer has
    connected to the node it learned), and the next probes find the log gone."""
    monkeypatch.setattr("bridge.worker.fetch.PROBE_INTERVAL_S", 0.0)
    link = Tally()
    fetcher = LogFetcher(f"127.0.0.1:{free_port()}", link=link)  # never started
    consumer = _ScriptedConsumer([True, False, False])
    fetcher._on_client_error(KafkaError(KafkaError._TRANSPORT, "Disconnected"))
    fetcher._probe_link(consumer)  # type: ignore[arg-type]
    assert link.down == [] and fetcher._link_error is not None  # answered, still suspect
    fetcher._probe_link(consumer)  # type: ignore[arg-type]
    assert link.down == ["Connection refused"]
    fetcher._probe_link(consumer)  # type: ignore[arg-type]
    assert len(link.down) == 2 and fetcher._link_error is not None  # down: probing on


def test_a_closed_idle_connection_raises_no_alarm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bridge.worker.fetch.PROBE_INTERVAL_S", 0.0)
    monkeypatch.setattr("bridge.worker.fetch.SUSPECT_S", 0.0)
    link = Tally()
    fetcher = LogFetcher(f"127.0.0.1:{free_port()}", link=link)
    fetcher._on_client_error(KafkaError(KafkaError._TRANSPORT, "Disconnected"))
    fetcher._probe_link(_ScriptedConsumer([True]))  # type: ignore[arg-type]
    assert link.down == [] and fetcher._link_error is None  # answered: no more probes


@contextlib.contextmanager
def _fetching_from_a_broker(
    tmp_path: Path, buckets: int, records: int = 0, **fetcher: int
) -> Iterator[tuple[LogFetcher, Recorder, EmbeddedBroker, str]]:
    """A fetcher on a real broker with a table's topic; both stopped on the way out."""
    broker = EmbeddedBroker(log_path=tmp_path / "broker.log").start()
    try:
        spec = LogSpec("db.race", pa.schema([("id", pa.int64())]), ["id"], buckets=buckets)
        ensure_topic(broker.bootstrap, spec)
        _produce(broker.bootstrap, spec.topic, records)
        link = Recorder(answers_allowed=True)
        fetcher = LogFetcher(broker.bootstrap, link=link, **fetcher)
        fetcher.start()
        try:
            yield fetcher, link, broker, spec.topic
        finally:
            fetcher.stop()
    finally:
        broker.stop()


@pytest.mark.kafka
def test_a_broker_that_stops_right_after_the_first_assignment_is_reported(
    tmp_path: Path,
) -> None:
    """The race CI met (issue 40): the broker stops about a second after the fetcher was
    assigned its partitions; the fetcher must still report the log unreachable."""
    with _fetching_from_a_broker(tmp_path, 2) as (fetcher, link, broker, topic):
        fetcher.assign(topic, {0: 0, 1: 0}, fetcher.new_epoch())
        broker.stop()
        assert link.told.wait(30), "the fetch thread never reported the log unreachable"
    assert fetcher.error is None


@pytest.mark.kafka
def test_a_broker_that_stops_while_nothing_is_assigned_is_reported(tmp_path: Path) -> None:
    """Between a revocation and the next assignment (a rebalance right after start) the
    fetcher fetches nothing, so no fetch can fail: its metadata requests still find out."""
    with _fetching_from_a_broker(tmp_path, 1) as (fetcher, link, broker, topic):
        fetcher.assign(topic, {0: 0}, fetcher.new_epoch())
        fetcher.drop(topic)  # revoked: nothing assigned
        broker.stop()
        assert link.told.wait(30), "the fetch thread never reported the log unreachable"


def _produce(bootstrap: str, topic: str, records: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(records):
        producer.produce(topic, b"{}", key=str(i).encode(), partition=0)
    assert producer.flush(30) == 0


@pytest.mark.kafka
def test_a_broker_that_stops_while_the_queue_is_full_is_reported(tmp_path: Path) -> None:
    """The table workers are behind (CI's race: right after the first assignment, with a
    backlog) and nobody drains the fetch queue: the fetch thread waits to hand over a batch
    and fetches nothing, so no fetch can fail; it must find the outage all the same."""
    with _fetching_from_a_broker(tmp_path, 1, 50, batch_size=10, queue_batches=1) as (
        fetcher,
        link,
        broker,
        topic,
    ):
        fetcher.assign(topic, {0: 0}, fetcher.new_epoch())
        deadline = time.monotonic() + 30
        while not fetcher.blocked:  # until the queue is full and the thread waits on it
            assert time.monotonic() < deadline, "the fetch queue never filled"
            time.sleep(0.05)
        broker.stop()
        assert link.told.wait(30), "the fetch thread never reported the log unreachable"
    assert fetcher.error is None
