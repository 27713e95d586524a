"""Reading ranges of a topic's partitions by their headers: the one marker scan.

The writer (the last barrier in the log), the reader (where barrier N ends) and the Spark
driver (the markers and row counts of what it plans) all walk records and tell markers
from rows; `log_entry` is that test and `scan_range` the bounded walk. No value is
decoded: a marker is a valueless record with a ``dts.barrier`` header (`logstore.markers`).

confluent_kafka is imported where a consumer is assigned: Spark's Python workers import
the driver's planning modules (which use `log_entry`) and need no Kafka client.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

from logstore.errors import LogScanError
from logstore.markers import Marker, parse_marker

#: confluent_kafka.KafkaError._PARTITION_EOF (a test holds the two equal)
PARTITION_EOF = -191
_POLL_S = 0.2


@dataclass(frozen=True)
class LogEntry:
    """One record read: a barrier marker, a row, or a plain tombstone."""

    partition: int
    offset: int
    marker: Marker | None
    is_row: bool  # a record with a value: a row change (markers and tombstones have none)


def log_entry(topic: str, msg: Any) -> LogEntry | None:
    """What a consumed message is; None for the end-of-partition event
    (``enable.partition.eof``). Raises LogScanError on a broker error."""
    p = int(msg.partition())
    err = msg.error()
    if err is not None:
        if err.code() == PARTITION_EOF:
            return None
        raise LogScanError(f"cannot read {topic}[{p}]: {err}")
    offset = int(msg.offset())
    if msg.value() is not None:
        return LogEntry(p, offset, None, True)
    return LogEntry(p, offset, parse_marker(p, offset, msg.headers()), False)


def refuses_group(err: Any) -> bool:
    """The broker refused the consumer's group: harmless to a consumer that never joins it
    nor commits (a scan, a reader, the worker's fetcher: librdkafka needs a group id and
    looks its coordinator up all the same), so a principal with READ on the topic alone can
    read it."""
    from confluent_kafka import KafkaError

    return err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def group_refused(msg: Any) -> bool:
    """A consumed message that is only the group's refusal (``refuses_group``)."""
    return refuses_group(msg.error())


def scan_range(
    consumer: Any, topic: str, ranges: Mapping[int, tuple[int, int]], timeout_s: float
) -> Generator[LogEntry, None, None]:
    """Every record of ``topic`` at ``start <= offset < end`` per partition, in offset order
    within a partition. ``consumer`` is assigned to the ranges (and unassigned when the scan
    ends or is closed); with ``enable.partition.eof`` a range ending at the high watermark
    also ends on a transaction's commit marker, which is never delivered.

    Raises LogScanError on a broker error or when the ranges are not read in ``timeout_s``.
    """
    from confluent_kafka import TopicPartition

    left = {p: end for p, (start, end) in ranges.items() if start < end}
    if not left:
        return
    consumer.assign([TopicPartition(topic, p, ranges[p][0]) for p in sorted(left)])
    deadline = time.monotonic() + timeout_s
    try:
        while left:
            if time.monotonic() > deadline:
                raise LogScanError(
                    f"could not read {topic} partitions {sorted(left)} up to offsets "
                    f"{left} within {timeout_s:.0f} s"
                )
            for msg in consumer.consume(num_messages=10_000, timeout=_POLL_S):
                if group_refused(msg):
                    continue
                p = int(msg.partition())
                if p not in ranges:
                    continue  # fetched for an earlier assignment of this consumer
                entry = log_entry(topic, msg)
                if entry is None or entry.offset + 1 >= left.get(p, 0):
                    left.pop(p, None)  # at its end (records past it are not the range's)
                if entry is not None and entry.offset < ranges[p][1]:
                    yield entry
    finally:
        consumer.unassign()


#: records read back from a partition's end at first when looking for its last marker
TAIL_SCAN_RECORDS = 2_000


def last_barrier_on_topic(bootstrap: str, topic: str, partitions: int) -> int | None:
    """Greatest barrier id among the markers at the tail of each partition.

    Reads uncommitted too: an id used by an aborted barrier must not be reused either.
    Scans a window at the end of each partition, widening it until a marker is found.
    Raises LogScanError naming the partition when it cannot be read.
    """
    from confluent_kafka import Consumer

    from logstore.client_config import confluent_config
    from logstore.watermarks import watermark

    consumer = Consumer(
        confluent_config(
            bootstrap,
            {"fetch.wait.max.ms": 20, "log_level": 3},
            {
                "group.id": "dts-barrier-scan",
                "enable.auto.commit": False,
                "isolation.level": "read_uncommitted",
                "enable.partition.eof": True,
            },
        )
    )
    try:
        best: int | None = None
        for p in range(partitions):
            low, high = watermark(consumer, topic, p)
            window = TAIL_SCAN_RECORDS
            end = high
            while end > low:
                start = max(low, end - window)
                found = _last_marker(consumer, topic, p, start, end)
                if found is not None:
                    best = found if best is None else max(best, found)
                    break
                end, window = start, window * 4
        return best
    finally:
        consumer.close()


def _last_marker(consumer: Any, topic: str, partition: int, start: int, end: int) -> int | None:
    try:
        entries = scan_range(consumer, topic, {partition: (start, end)}, timeout_s=30)
        return max((e.marker.barrier for e in entries if e.marker is not None), default=None)
    except LogScanError as exc:
        raise LogScanError(f"cannot scan {topic}[{partition}] for barrier markers: {exc}") from exc
