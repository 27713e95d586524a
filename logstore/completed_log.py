"""The source transactions an ingest completed, committed with its barriers.

A Kafka Connect worker that dies sends again what it produced after its last flushed
offset: whole transactions the ingest already wrote. The ingest drops them by their ids
(``TransactionTracker.done``). Kept only in memory, that knowledge died with the ingest:
a Connect worker and an ingest restarting together re-applied the repeated transactions
(setting rows back, and losing the later updates whose repeats were still known).

So each barrier writes the ids of the transactions completed since the last one to the
ingest's own topic, ``<group>.completed`` (one partition), in the barrier's Kafka
transaction: they are committed exactly when the barrier and its source offsets are. A
restarted ingest reads the topic's tail back (``read_completed``).
"""

from __future__ import annotations

import time

import orjson
from confluent_kafka import Consumer, TopicPartition

from logstore.client_config import confluent_config
from logstore.errors import LogStoreError
from logstore.topics import create_topic
from logstore.watermarks import watermark

#: records read back at start: one per barrier, so many barriers cover any Connect
#: worker's redelivery window (its offset flush interval: 60 s by default)
TAIL_RECORDS = 2_000
READ_TIMEOUT_S = 60.0
RETENTION_MS = 7 * 86_400_000


def completed_topic(group_id: str) -> str:
    return f"{group_id}.completed"


def ensure_completed_topic(bootstrap: str, topic: str) -> None:
    create_topic(bootstrap, topic, 1, {"retention.ms": str(RETENTION_MS)})


def encode_completed(ids: list[str]) -> bytes:
    return orjson.dumps(ids)


def read_completed(bootstrap: str, topic: str, keep: int) -> list[str]:
    """The last ``keep`` transaction ids the committed barriers recorded, oldest first.
    Call it after the ingest's writer has started: that fences (aborts) a crashed run's
    open transaction, which a read_committed reader would otherwise wait behind."""
    consumer = Consumer(
        confluent_config(
            bootstrap,
            {"log_level": 3},
            {
                "group.id": f"{topic}.reader",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            },
        )
    )
    try:
        low, high = watermark(consumer, topic, 0)
        start = max(low, high - TAIL_RECORDS)
        if start >= high:
            return []
        consumer.assign([TopicPartition(topic, 0, start)])
        ids: list[str] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while _position(consumer, topic) < high:
            if time.monotonic() > deadline:
                raise LogStoreError(
                    f"{topic}: the ingest's completed transactions not read back within "
                    f"{READ_TIMEOUT_S:.0f}s (offset {_position(consumer, topic)} of {high})"
                )
            for msg in consumer.consume(1000, timeout=1.0):
                value = msg.value() if msg.error() is None else None
                if value:
                    ids += orjson.loads(value)
        return ids[-keep:]
    finally:
        consumer.close()


def _position(consumer: Consumer, topic: str) -> int:
    (tp,) = consumer.position([TopicPartition(topic, 0)])
    return int(tp.offset) if tp.offset >= 0 else -1
