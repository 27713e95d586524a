"""Which client errors a watermark query asks again through (a broker failover), and
which it reports at once."""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException

from logstore import watermarks
from logstore.broker import EmbeddedBroker
from logstore.client_config import confluent_config
from logstore.kafka_failures import is_transient
from logstore.topics import create_topic
from logstore.watermarks import watermark


@pytest.mark.parametrize(
    ("code", "transient"),
    [
        (KafkaError._TIMED_OUT, True),  # the old leader does not answer
        (KafkaError._DESTROY_BROKER, True),  # its handle went as the cluster changed
        (KafkaError.NOT_LEADER_FOR_PARTITION, True),
        (KafkaError.LEADER_NOT_AVAILABLE, True),
        (KafkaError.OFFSET_NOT_AVAILABLE, True),  # a new leader's high watermark lags
        (KafkaError.FENCED_LEADER_EPOCH, True),
        (KafkaError.UNKNOWN_LEADER_EPOCH, True),
        (KafkaError._ALL_BROKERS_DOWN, False),  # nothing answers: say so now
        (KafkaError.UNKNOWN_TOPIC_OR_PART, False),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, False),
    ],
)
def test_transient_errors(code: int, transient: bool) -> None:
    assert is_transient(KafkaException(KafkaError(code))) is transient


class _Flaky:
    """A consumer whose first answers are a failover's; ``named`` is whether the cluster's
    metadata names the topic's partition 0."""

    def __init__(self, failures: list[int], *, named: bool = False) -> None:
        self.failures = failures
        self.named = named
        self.calls = 0
        self.refreshed = 0

    def get_watermark_offsets(self, tp: object, timeout: float) -> tuple[int, int]:
        self.calls += 1
        if self.failures:
            raise KafkaException(KafkaError(self.failures.pop(0)))
        return (3, 9)

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        self.refreshed += 1
        topics = {topic: SimpleNamespace(error=None, partitions={0: None})} if self.named else {}
        return SimpleNamespace(topics=topics)


def test_a_query_asks_again_through_a_failover_and_not_past_a_definite_error() -> None:
    flaky = _Flaky(
        [
            KafkaError._TIMED_OUT,
            KafkaError.NOT_LEADER_FOR_PARTITION,
            KafkaError.OFFSET_NOT_AVAILABLE,
        ]
    )
    assert watermark(flaky, "t", 0) == (3, 9) and flaky.calls == 4
    with pytest.raises(KafkaException):
        watermark(_Flaky([KafkaError.UNKNOWN_TOPIC_OR_PART]), "t", 0)
    with pytest.raises(KafkaException):  # still failing when the failover window closes
        watermark(_Flaky([KafkaError._TIMED_OUT] * 100), "t", 0, failover_s=0.3)


def test_a_partition_missing_from_the_clients_metadata_is_asked_again_for_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Right after a failover a metadata answer can leave a partition out: the query asks
    again (it once killed a Spark stream in the cluster test), but a partition that stays
    unknown is reported after STALE_METADATA_S from the first time it was missing, not
    after the whole failover window."""
    flaky = _Flaky([KafkaError._UNKNOWN_PARTITION] * 2)
    assert watermark(flaky, "t", 0) == (3, 9) and flaky.calls == 3
    assert flaky.refreshed == 2  # each retry asked for the topic's metadata again
    monkeypatch.setattr(watermarks, "STALE_METADATA_S", 0.3)
    start = time.monotonic()
    with pytest.raises(KafkaException):
        watermark(_Flaky([KafkaError._UNKNOWN_PARTITION] * 1000), "t", 0)
    assert time.monotonic() - start < 5  # not FAILOVER_S (120 s)


def test_the_stale_window_starts_when_the_partition_first_goes_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A query that first waited through timeouts (a leader's election) still gives a
    partition missing after that its whole STALE_METADATA_S."""
    monkeypatch.setattr(watermarks, "STALE_METADATA_S", 0.5)
    monkeypatch.setattr(watermarks, "time", _Clock())  # the module's clock only
    failures = [KafkaError._TIMED_OUT] * 5 + [KafkaError._UNKNOWN_PARTITION] * 2
    flaky = _Flaky(failures)  # 1 s of timeouts, then 0.4 s of a missing partition
    assert watermark(flaky, "t", 0) == (3, 9)


def test_a_broker_that_has_not_learned_of_a_partition_the_cluster_names_is_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a cluster, the leader the client was told of can answer "unknown topic or
    partition" for a moment about a topic just created (a three-broker bank's ingest died
    of it at start): asked again while the cluster's metadata names the partition, for at
    most STALE_METADATA_S; a partition the metadata does not name is reported at once."""
    lagging = _Flaky([KafkaError.UNKNOWN_TOPIC_OR_PART] * 3, named=True)
    assert watermark(lagging, "t", 0) == (3, 9) and lagging.calls == 4
    start = time.monotonic()
    with pytest.raises(KafkaException):
        watermark(_Flaky([KafkaError.UNKNOWN_TOPIC_OR_PART] * 1000), "t", 0)
    assert time.monotonic() - start < 1  # at once: the cluster does not name it either
    monkeypatch.setattr(watermarks, "STALE_METADATA_S", 0.3)
    start = time.monotonic()
    with pytest.raises(KafkaException):
        watermark(_Flaky([KafkaError.UNKNOWN_TOPIC_OR_PART] * 1000, named=True), "t", 0)
    assert time.monotonic() - start < 5  # not FAILOVER_S (120 s)


class _Clock:
    """`time` for the watermarks module: sleeping advances it, nothing waits."""

    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_a_real_clusters_metadata_tells_a_lagging_broker_from_a_missing_partition(
    broker: EmbeddedBroker,
) -> None:
    """Through a real broker's metadata: "unknown topic or partition" about a partition
    the cluster names is a broker catching up (asked again); about a partition or a topic
    it does not name, it is really missing (reported)."""
    topic = f"wm-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1, {})
    consumer = Consumer(confluent_config(broker.bootstrap, {"group.id": topic}))
    unknown = KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    try:
        assert watermark(consumer, topic, 0) == (0, 0)
        assert watermarks._lagging_broker(unknown, consumer, topic, 0)
        assert not watermarks._lagging_broker(unknown, consumer, topic, 1)
        assert not watermarks._lagging_broker(unknown, consumer, f"{topic}-absent", 0)
    finally:
        consumer.close()
