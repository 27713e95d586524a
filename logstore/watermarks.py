"""A partition's (low, high) offsets, asked through a failover.

While Kafka moves a partition's leadership (a broker crashed: the controller fences it
after ``broker.session.timeout.ms``, 9 s by default, then elects a new leader) a
watermark query times out or names no leader. Every reader of the log asks here, and
keeps asking for a bounded while, so a broker failure is a stall, not a failed job.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from logstore.kafka_failures import is_transient

#: how long a query keeps asking through a leader election (a controller failover on a
#: three-node cluster took ~19 s in tests/bridge/worker/test_worker_kafka_cluster.py)
FAILOVER_S = 120.0
#: how long a partition the client's metadata lacks is asked again, from the first time
#: it was missing: right after a leader and a controller were killed, a metadata answer
#: left a partition out, and the client kept that answer (the cluster test's Spark stream
#: died of it); each retry asks the cluster for the topic's metadata again. A partition
#: that really is not there is reported after this, not after a whole failover window
STALE_METADATA_S = 30.0
#: how long the metadata request of a retry may take
REFRESH_TIMEOUT_S = 5.0
#: the broker's "unknown topic or partition" (code 3): on a cluster, a broker learns of a
#: partition from the metadata log at its own pace, so the leader the client was told of
#: can answer this for a moment about a topic just created or a partition just moved to
#: it (a three-broker bank's ingest died of it at start). Kafka's protocol calls it
#: retriable; it is asked again only while the cluster's metadata names the partition
_BROKER_UNKNOWN = KafkaError.UNKNOWN_TOPIC_OR_PART


def watermark(
    consumer: Any, topic: str, partition: int, *, failover_s: float = FAILOVER_S
) -> tuple[int, int]:
    """(low, high) of one partition, through a failover of at most ``failover_s``."""
    start = time.monotonic()
    stale_since: float | None = None
    while True:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            return int(low), int(high)
        except KafkaException as exc:
            lagging = _lagging_broker(exc, consumer, topic, partition)  # asked the cluster
            stale = lagging or _stale_metadata(exc)
            if not (stale or is_transient(exc)):
                raise
            now = time.monotonic()
            if now - start >= failover_s:
                raise
            if stale:
                stale_since = now if stale_since is None else stale_since
                if now - stale_since >= STALE_METADATA_S:
                    raise
                if not lagging:
                    _refresh_metadata(consumer, topic)
            time.sleep(0.2)


def _refresh_metadata(consumer: Any, topic: str) -> None:
    """Ask the cluster for ``topic``'s metadata: the answer replaces the client's cached
    one, which a watermark query alone does not renew."""
    with contextlib.suppress(KafkaException):
        consumer.list_topics(topic, timeout=REFRESH_TIMEOUT_S)


def _stale_metadata(exc: KafkaException) -> bool:
    """The client's own metadata lacks the partition (``_UNKNOWN_PARTITION``)."""
    err = exc.args[0] if exc.args else None
    return isinstance(err, KafkaError) and err.code() == KafkaError._UNKNOWN_PARTITION


def _lagging_broker(exc: KafkaException, consumer: Any, topic: str, partition: int) -> bool:
    """The broker asked does not know a partition the cluster's metadata names: it has not
    caught up yet. A partition the metadata does not name either is really missing."""
    err = exc.args[0] if exc.args else None
    if not (isinstance(err, KafkaError) and err.code() == _BROKER_UNKNOWN):
        return False
    try:
        meta = consumer.list_topics(topic, timeout=REFRESH_TIMEOUT_S).topics.get(topic)
    except KafkaException:
        return False
    return meta is not None and meta.error is None and partition in meta.partitions


def watermarks(
    consumer: Any, topic: str, partitions: int, *, failover_s: float = FAILOVER_S
) -> dict[int, tuple[int, int]]:
    """(low, high) of partitions ``0 .. partitions - 1``."""
    return {p: watermark(consumer, topic, p, failover_s=failover_s) for p in range(partitions)}
