"""What an ingest reads: its source topics, the tables they go to, the figures it keeps,
and the consumer of the group's committed positions (``logstore.ingest`` copies them)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np
import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from logstore.client_config import confluent_config
from logstore.codec import Bucketer, Decoded
from logstore.dlq import DeadLetterQueue
from logstore.errors import LogStoreError
from logstore.spec import DecimalMode, LogSpec
from logstore.topics import describe_topic


@dataclass
class IngestStats:
    records: int = 0
    rows: int = 0
    barriers: int = 0
    dead_letters: int = 0
    truncates: int = 0
    skipped: int = 0  # heartbeats and schema-change events (not changes)
    split_transactions: int = 0  # barriers closed inside a source transaction (timeout)
    redelivered: int = 0  # events of complete transactions a restarted connector sent again
    last_barrier: int | None = None


def source_spec(spec: LogSpec, source_topic: str, decimal_mode: DecimalMode = "precise") -> LogSpec:
    """How source records are read: upsert semantics with a key (Debezium's ``u`` may
    lack ``before``, e.g. PostgreSQL without REPLICA IDENTITY FULL), and decimals in
    records without a schema as the connector's ``decimal.handling.mode`` writes them
    (Debezium's default, ``precise``: base64, never read as a number)."""
    return dataclasses.replace(
        spec,
        topic=source_topic,
        consistency="transactional",
        changelog_mode="upsert" if spec.primary_key else "all",
        decimal_mode=decimal_mode,
    )


@dataclass(frozen=True)
class IngestSource:
    """One more source topic of an ingest and the table log it is copied into;
    ``collection``: its table as Debezium's ``END`` events name it (``schema.table``),
    else learnt from its first event. Until every table's is known, no transaction of an
    ingest of several tables counts as complete: a barrier waits (at most 30 s)."""

    topic: str
    spec: LogSpec
    bucketer: Bucketer
    collection: str | None = None


@dataclass
class SourceState:
    topic: str
    spec: LogSpec  # the table's log
    src_spec: LogSpec  # how its records are read
    dlq: DeadLetterQueue | None
    named: bool = False  # its data collection's names learnt from a record


@dataclass
class SourceBatch:
    """One source topic's records of a consumed batch, decoded."""

    source: SourceState
    decoded: Decoded
    parts: np.ndarray  # partition and offset of each record kept (arrival order)
    offs: np.ndarray
    arrival: np.ndarray  # each kept record's index in the consumed batch
    ids: pa.Array | None = None  # their source transactions (with a transaction topic)
    orders: pa.Array | None = None  # and each one's total_order in its transaction
    repeated: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))


class LazyField(Sequence[Any]):
    """One field of each message (``key``, ``headers``), read when indexed."""

    def __init__(self, msgs: list[Any], field: str) -> None:
        self._msgs = msgs
        self._field = field

    def __len__(self) -> int:
        return len(self._msgs)

    @overload
    def __getitem__(self, i: int) -> Any: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[Any]: ...

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [getattr(m, self._field)() for m in self._msgs[i]]
        return getattr(self._msgs[i], self._field)()


def assigned_consumer(bootstrap: str, topics: Sequence[str], group_id: str) -> Consumer:
    """A consumer of the group's committed positions in ``topics`` (else their
    beginnings: a table added to a running source is read from its start)."""
    parts = []
    for topic in topics:
        info = describe_topic(bootstrap, topic, with_config=False)
        if info is None:
            raise LogStoreError(f"topic {topic!r} does not exist on {bootstrap}")
        parts += [TopicPartition(topic, p) for p in range(info.partitions)]
    consumer = Consumer(
        confluent_config(
            bootstrap,
            {
                "fetch.wait.max.ms": 100,
                "log_level": 3,
                # Debezium events are large (~0.5 KB with their source block): the
                # 1 MB per-partition default leaves a fast consumer waiting on fetches
                "max.partition.fetch.bytes": 16 << 20,
                "fetch.max.bytes": 64 << 20,
            },
            # exactly-once needs these whatever the settings say
            {
                "group.id": group_id,
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            },
        )
    )
    committed = committed_offsets(consumer, parts, timeout_s=15)
    consumer.assign(
        [
            TopicPartition(
                tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            )
            for tp in committed
        ]
    )
    return consumer


COORDINATOR_NOT_READY = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
)


def committed_offsets(
    consumer: Consumer, parts: list[TopicPartition], timeout_s: float
) -> list[TopicPartition]:
    """The group's committed offsets, waiting for a coordinator that is still starting.

    On a freshly started broker the first committed() fails with NOT_COORDINATOR while
    ``__consumer_offsets`` is being created; that is a wait, not an error for the user.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return list(consumer.committed(parts, timeout=max(1.0, deadline - time.monotonic())))
        except KafkaException as e:
            err = e.args[0] if e.args else None
            code = err.code() if isinstance(err, KafkaError) else None
            if code not in COORDINATOR_NOT_READY or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
