"""Executor-side reading of log-tier ranges (planned by `bridge.spark.read.plan_log`).

One Spark partition per Kafka partition (= bucket): records [start, end) decoded
with `logstore.codec.decode_records`, each row tagged with the barrier whose marker
follows it. Consumers read `read_committed`: records of aborted transactions never
reach them.

Consumers are kept per executor Python worker (Spark reuses its Python workers across
tasks), one per (bootstrap, topic, partition), still assigned where the last range
ended: the next micro-batch's range of that partition starts exactly there, so its
records are usually already fetched. Creating a consumer, connecting and assigning
cost more than the rows of a small micro-batch.
"""

from __future__ import annotations

import atexit
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from bridge.spark.errors import LogTruncated
from bridge.spark.options import BARRIER, ROW_KIND
from bridge.spark.options.schema import conform
from bridge.spark.read.kafka_access import consumer
from bridge.spark.read.log_state import normalized
from bridge.spark.read.parts import LogPartition
from logstore.codec import RawRecord, decode_records
from logstore.errors import LogScanError


@dataclass
class _Kept:
    """A consumer kept between tasks: assigned to one partition, read up to `end`."""

    consumer: Any
    end: int = -1  # the range end the last read stopped at (-1: not positioned)
    ahead: list[Any] = field(default_factory=list)  # fetched messages at or past `end`


_KEPT: dict[tuple[str, str, int], _Kept] = {}
POLL_S = 0.02


@atexit.register
def _close_all() -> None:
    """Close the kept consumers when the Python worker exits."""
    while _KEPT:
        _key, kept = _KEPT.popitem()
        with contextlib.suppress(Exception):
            kept.consumer.close()


def _kept(p: LogPartition) -> _Kept:
    from confluent_kafka import TopicPartition

    key = (p.bootstrap, p.spec.topic, p.partition)
    kept = _KEPT.get(key)
    if kept is None:
        kept = _KEPT[key] = _Kept(consumer(p.bootstrap, eof=False))
    if kept.end != p.start:  # not where the last range ended: seek
        kept.consumer.assign([TopicPartition(p.spec.topic, p.partition, p.start)])
        kept.ahead = []
    return kept


def _drop(p: LogPartition) -> None:
    kept = _KEPT.pop((p.bootstrap, p.spec.topic, p.partition), None)
    if kept is not None:
        kept.consumer.close()


def read_log_range(p: LogPartition, timeout_s: float = 60.0) -> Iterator[pa.RecordBatch]:
    """Executor side: decode one partition's range and tag rows with their barriers."""
    try:
        # the replay first: it ends where the range starts, so the kept consumer reads on
        # (an empty one is not fetched: that would drop the records already fetched ahead)
        replaying = p.state is not None and p.state.offset < p.start
        replay = _fetch(_replay_range(p), timeout_s) if replaying else []
        records = _fetch(p, timeout_s)
    except BaseException:
        _drop(p)  # its position is unknown now
        raise
    if not records:
        return
    decoded = decode_records(records, p.spec)
    table = decoded.table
    if p.state is None:
        _refuse_truncates(decoded, p)
    else:
        # normalizing keeps the bucket's rows, so a truncate becomes their -D rows
        before = decode_records(replay, p.spec)
        table = normalized(
            table,
            before.table,
            p.state,
            p.partition,
            p.spec,
            truncates=sorted(t.offset for t in decoded.truncates),
            replay_truncated_at=max((t.offset for t in before.truncates), default=None),
        )
    yield from _tag(table, p)


def _replay_range(p: LogPartition) -> LogPartition:
    """The records between the state's snapshot and the range (often none)."""
    assert p.state is not None
    return LogPartition(
        p.bootstrap, p.spec, p.partition, p.state.offset, p.start, [], p.target, p.columns
    )


def _refuse_truncates(decoded: Any, p: LogPartition) -> None:
    if decoded.truncates:
        # without normalizing, no state says which rows the truncate removed; the file
        # tier's changes do (-D rows), as does a normalizing read (log.normalize=true)
        first = decoded.truncates[0]
        raise LogTruncated(
            f"{p.spec.topic}[{p.partition}]: the table was truncated at offset {first.offset}; "
            "a log-tier read without log.normalize cannot show it. Read this range with "
            "tier=file (its changes hold the removed rows as -D) or restart the stream from "
            "a snapshot after it"
        )


def _fetch(p: LogPartition, timeout_s: float) -> list[Any]:
    kept = _kept(p)
    kept.end = -1  # unknown until this read completes
    records: list[Any] = []
    deadline = time.monotonic() + timeout_s
    last = p.start - 1
    pending, kept.ahead = kept.ahead, []
    polled = False
    while last < p.end - 1:
        if not pending:
            if time.monotonic() > deadline:
                raise LogScanError(
                    f"{p.spec.topic}[{p.partition}]: could not read up to offset {p.end} in "
                    f"{timeout_s:.0f} s"
                )
            # consume() waits its whole timeout unless it fills the batch: first take
            # what the kept consumer fetched ahead (usually the whole range), then short
            # waits, so a small range returns as soon as its records are in
            wait = POLL_S if polled else 0.0
            polled = True
            pending = kept.consumer.consume(num_messages=10000, timeout=wait)
        for i, msg in enumerate(pending):
            if msg.error() is not None:
                raise LogScanError(f"{p.spec.topic}[{p.partition}]: {msg.error()}")
            if msg.offset() < p.start:
                continue  # fetched before a seek
            if msg.offset() >= p.end:
                kept.ahead = pending[i:]
                last = msg.offset()
                break
            last = msg.offset()
            if msg.value() is not None:
                records.append(
                    RawRecord(p.partition, msg.offset(), msg.key(), msg.value(), msg.headers())
                )
        pending = []
    kept.end = p.end
    return records


def _tag(table: pa.Table, p: LogPartition) -> Iterator[pa.RecordBatch]:
    offsets = table.column("_offset").to_numpy()
    m_off = np.array([m[0] for m in p.markers], dtype=np.int64)
    m_bar = np.array([m[1] for m in p.markers], dtype=np.int64)
    idx = np.searchsorted(m_off, offsets)  # the marker after each row closes its barrier
    # rows past the range's last marker belong to a barrier not read in this range
    keep = idx < len(m_off)
    idx_c = np.minimum(idx, max(len(m_off) - 1, 0))
    barriers = m_bar[idx_c] if len(m_off) else np.zeros(len(offsets), dtype=np.int64)
    table = table.append_column(BARRIER, pa.array(barriers, pa.int64())).filter(pa.array(keep))
    keep_cols = [*p.columns, ROW_KIND, BARRIER]
    table = table.select([c for c in keep_cols if c in table.schema.names])
    for batch in table.to_batches(max_chunksize=65536):
        if batch.num_rows:
            yield conform(batch, p.target)
