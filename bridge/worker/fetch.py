"""The worker's bulk fetch: exactly the partitions Faust assigned, read in batches.

Faust owns the consumer group (membership, assignment, rebalance callbacks), but
its consumer never fetches table data: handing records over one event at a time
costs more than everything else the worker does. Instead one confluent-kafka
consumer, ``assign``ed the partitions Faust gave this worker and positioned at the
offsets of each table's latest snapshot, fetches them with ``consume(num_messages=…)``
in its own thread (``read_committed``), and puts one ``Fetched`` batch per topic on a
bounded queue. librdkafka prefetches in its own threads meanwhile, so fetching
overlaps decoding and writing; when the queue is full this thread waits, the
prefetch queue fills to ``queued.max.messages.kbytes`` and fetching stops:
backpressure with bounded memory.

Every (re)assignment of a topic gets a new *epoch*. A batch carries the epoch it
was fetched under and the table worker admits it only if its buckets were opened
for that epoch, so nothing fetched for an older position is ever applied.

A broker outage needs nothing from this thread: librdkafka reconnects and goes on
fetching from the same positions. It only tells the worker's ``LinkObserver``
(``bridge.worker.reachability``) whether the log answers: any connection error
(a failed connect, a closed connection, "all brokers down") makes it probe with a
metadata request every ``PROBE_INTERVAL_S`` for ``SUSPECT_S`` and then until one
answers. The probe confirms the outage first, so a single closed idle connection
raises no alarm. With nothing assigned it asks for a topic's metadata every
``IDLE_PROBE_S``: no fetch can fail then. "All brokers down" alone is not enough: librdkafka says it only once
every broker it knows has failed after connecting, so a broker that stops before the
consumer has connected to the node it learned from the bootstrap (a second or so after
the first assignment) never raises it; and a probe that races a broker's shutdown may
still be answered, hence the probes that follow.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from bridge.worker.errors import FetchError
from logstore.acls import refusal
from logstore.client_config import client_logger
from logstore.consumer_close import close_consumers
from logstore.records import LogRecords
from logstore.scan import refuses_group

log = logging.getLogger(__name__)

#: while the log looks down: seconds between probes, and how long one may wait
PROBE_INTERVAL_S = 1.0
PROBE_TIMEOUT_S = 2.0
#: after a connection error, probe this long even while the probes are answered
SUSPECT_S = 5.0
#: with no partition assigned nothing is fetched, so nothing can fail: probe this often
IDLE_PROBE_S = 2.0
# errors that say a broker connection, not a partition, failed: librdkafka reconnects
_LINK_ERRORS = (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE)


class LinkObserver(Protocol):
    """Told whether the log answers (``bridge.worker.reachability.LogReachability``)."""

    def unreachable(self, error: str) -> None: ...

    def reached(self) -> None: ...


@dataclass(frozen=True)
class Fetched:
    topic: str
    epoch: int
    records: LogRecords


@dataclass(frozen=True)
class _Assign:
    topic: str
    offsets: dict[int, int]
    epoch: int


@dataclass(frozen=True)
class _Drop:
    topic: str
    partitions: tuple[int, ...]


class LogFetcher:
    """One consumer thread for all of this worker's assigned partitions."""

    def __init__(
        self,
        bootstrap: str,
        *,
        batch_size: int = 20_000,
        queue_batches: int = 4,
        prefetch_kbytes: int = 32_768,
        client_config: Mapping[str, Any] | None = None,
        link: LinkObserver | None = None,
    ) -> None:
        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            # never joins a group (assign only) and never commits: offsets live in snapshots
            "group.id": f"dts-worker-fetch-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,
            "queued.max.messages.kbytes": prefetch_kbytes,
            "log_level": 3,
            # both served by consume()/poll() in the fetch thread. librdkafka's own lines
            # (a failed connect on every retry of an outage) go to the logstore.kafka
            # logger, once per condition, instead of raw to stderr; this consumer never
            # asks for committed offsets, which a Python logger would upset
            "logger": client_logger(),
            "error_cb": self._on_client_error,
        }
        config.update(client_config or {})
        self._config = config
        self.batch_size = batch_size
        self.out: queue.Queue[Fetched] = queue.Queue(maxsize=queue_batches)
        self._commands: queue.SimpleQueue[_Assign | _Drop] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._epochs = itertools.count(1)
        self._assigned: dict[str, set[int]] = {}  # topic -> partitions fetched
        self._topic_epoch: dict[str, int] = {}
        self._consumer: Consumer | None = None
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.blocked = False  # waiting for the queue: the table workers are behind
        # (topic, partition) -> log end; read by other threads, so the fetch thread (the
        # only one that may call the consumer while it consumes) refreshes it
        self._highwater: dict[tuple[str, int], int] = {}
        self._highwater_at = 0.0
        self.link = link
        self._link_error: str | None = None  # a connection failed: probe until one answers
        self._suspect_until = 0.0  # ... and at least until then
        self._idle_probe_at = 0.0
        self._probe_at = 0.0

    # -- called from other threads ---------------------------------------------------

    def new_epoch(self) -> int:
        return next(self._epochs)

    def assign(self, topic: str, offsets: Mapping[int, int], epoch: int) -> None:
        """Fetch exactly these partitions of ``topic`` from these offsets (replaces the
        topic's previous partitions); batches are tagged ``epoch``."""
        self._commands.put(_Assign(topic, dict(offsets), epoch))
        self._wake.set()

    def drop(self, topic: str, partitions: list[int] | None = None) -> None:
        """Stop fetching these partitions of ``topic`` (all when None)."""
        self._commands.put(_Drop(topic, tuple(partitions) if partitions is not None else ()))
        self._wake.set()

    def highwater(self, topic: str, partition: int) -> int | None:
        """The partition's log end as last seen by a fetch (None before the first)."""
        return self._highwater.get((topic, partition))

    def start(self) -> None:
        self._consumer = Consumer(self._config)
        self._thread = threading.Thread(target=self._run, name="dts-fetch", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._consumer is not None:
            # it commits nothing (the worker's positions are in its snapshots): a close
            # that hangs on the coordinator must not hold up the worker's stop
            close_consumers({"dts-fetch": self._consumer})
            self._consumer = None

    # -- the fetch thread --------------------------------------------------------------

    def _run(self) -> None:
        assert self._consumer is not None
        try:
            while not self._stop.is_set():
                self._apply_commands(self._consumer)
                if not any(self._assigned.values()):
                    self._consumer.poll(0)  # serves error_cb: an idle worker reports too
                    self._nudge_when_idle(self._consumer)
                    self._probe_link(self._consumer)
                    self._wake.wait(0.2)
                    self._wake.clear()
                    continue
                msgs = self._consumer.consume(num_messages=self.batch_size, timeout=0.2)
                if msgs:
                    self._deliver(msgs)
                self._probe_link(self._consumer)
                self._refresh_highwater(self._consumer)
        except BaseException as exc:  # surfaced by the data plane, which stops the worker
            log.exception("fetch thread failed: %r", exc)
            self.error = exc

    def _apply_commands(self, consumer: Consumer) -> None:
        while True:
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                return
            current = self._assigned.setdefault(cmd.topic, set())
            if isinstance(cmd, _Drop):
                gone = list(cmd.partitions or current)
                self._unassign(consumer, cmd.topic, [p for p in gone if p in current])
                continue
            self._unassign(consumer, cmd.topic, list(current))
            if cmd.offsets:
                consumer.incremental_assign(
                    [TopicPartition(cmd.topic, p, o) for p, o in sorted(cmd.offsets.items())]
                )
            self._assigned[cmd.topic] = set(cmd.offsets)
            self._topic_epoch[cmd.topic] = cmd.epoch

    def _unassign(self, consumer: Consumer, topic: str, partitions: list[int]) -> None:
        if not partitions:
            return
        consumer.incremental_unassign([TopicPartition(topic, p) for p in partitions])
        self._assigned[topic].difference_update(partitions)

    def _refresh_highwater(self, consumer: Consumer) -> None:
        now = time.monotonic()
        if now - self._highwater_at < 0.5:
            return
        self._highwater_at = now
        fresh: dict[tuple[str, int], int] = {}
        for topic, parts in self._assigned.items():
            for p in parts:
                try:
                    _low, high = consumer.get_watermark_offsets(
                        TopicPartition(topic, p), cached=True
                    )
                except KafkaException:
                    continue
                if high is not None and high >= 0:
                    fresh[(topic, p)] = int(high)
        self._highwater = fresh

    # -- is the log there? --------------------------------------------------------------

    def _on_client_error(self, err: KafkaError) -> None:
        if refuses_group(err):  # this consumer never joins nor commits its group
            return
        if err.code() in _LINK_ERRORS:
            self._link_error = err.str()
            self._suspect_until = time.monotonic() + SUSPECT_S
        elif err.fatal():
            self.error = FetchError(f"the fetch consumer failed: {err.str()}")
        else:
            log.warning("fetch: %s", err.str())

    def _nudge_when_idle(self, consumer: Consumer) -> None:
        """Nothing assigned (a rebalance under way, more workers than buckets), or nothing
        fetched while the queue is full: no fetch fails when the brokers go, so now and
        then ask for the metadata of a topic this fetcher read. A request that fails starts
        the probes, which confirm the outage before it is reported (one slow answer on a
        busy machine is no outage)."""
        now = time.monotonic()
        topic = next(iter(self._topic_epoch), None)
        if self._link_error is not None or now < self._idle_probe_at or topic is None:
            return
        self._idle_probe_at = now + IDLE_PROBE_S
        try:
            consumer.list_topics(topic, timeout=PROBE_TIMEOUT_S)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            self._link_error = err.str() if isinstance(err, KafkaError) else str(exc)
            self._suspect_until = now + SUSPECT_S

    def _probe_link(self, consumer: Consumer) -> None:
        """After a connection error: a metadata request every PROBE_INTERVAL_S, for
        SUSPECT_S at least and then until one is answered."""
        if self._link_error is None or self.link is None:
            self._link_error = None
            return
        now = time.monotonic()
        if now < self._probe_at:
            return
        self._probe_at = now + PROBE_INTERVAL_S
        topic = next((t for t, parts in self._assigned.items() if parts), None)
        error = self._link_error
        try:
            answered = bool(consumer.list_topics(topic, timeout=PROBE_TIMEOUT_S).brokers)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            answered, error = False, err.str() if isinstance(err, KafkaError) else str(exc)
        if answered:
            if now >= self._suspect_until:
                self._link_error = None
            self.link.reached()
        else:
            self.link.unreachable(error)

    def _deliver(self, msgs: list[Any]) -> None:
        errors = [m for m in msgs if m.error() is not None]
        if errors:
            self._check_errors(errors)
            msgs = [m for m in msgs if m.error() is None]
        # records do not end an outage here: librdkafka hands out what it fetched before
        # the brokers went down after saying so, and says so only once; the probe decides
        by_topic: dict[str, list[Any]] = {}
        topics = [m.topic() for m in msgs]
        if topics and topics[0] == topics[-1] and len(set(topics)) == 1:
            by_topic[topics[0]] = msgs
        else:
            for t in set(topics):
                by_topic[t] = [m for m, mt in zip(msgs, topics, strict=True) if mt == t]
        for topic, group in by_topic.items():
            epoch = self._topic_epoch.get(topic)
            if epoch is None:
                continue
            self._put(Fetched(topic, epoch, LogRecords.from_messages(group)))

    def _put(self, item: Fetched) -> None:
        while not self._stop.is_set():
            try:
                self.out.put(item, timeout=0.2)
                self.blocked = False
                return
            except queue.Full:
                self.blocked = True
                # no fetch runs while the table workers are behind, so none can fail if
                # the brokers go (and a data plane stalled by the outage never drains the
                # queue): ask for metadata now and then, as an idle fetcher does
                assert self._consumer is not None
                self._nudge_when_idle(self._consumer)
                self._probe_link(self._consumer)

    def _check_errors(self, errors: list[Any]) -> None:
        for m in errors:
            err: KafkaError = m.error()
            if err.code() in _LINK_ERRORS or refuses_group(err):
                self._on_client_error(err)
                continue
            if err.fatal() or err.code() in (
                KafkaError._AUTHENTICATION,
                KafkaError.SASL_AUTHENTICATION_FAILED,
                KafkaError.TOPIC_AUTHORIZATION_FAILED,
            ):
                doing = f"fetching {m.topic()}[{m.partition()}] failed"
                refused = refusal(err, doing, {"Topic": f"READ on Topic {m.topic()!r}"})
                raise FetchError(str(refused) if refused else f"{doing}: {err.str()}")
            # transient (broker restart, leader change): librdkafka retries by itself
            log.warning("fetch: %s", err.str())
