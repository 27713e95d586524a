"""LogReader: reads a table's log as Arrow batches and barrier events.

Start modes: ``"earliest"``, ``"latest"``, ``{"timestamp": ms}``,
``{"offsets": {partition: offset}}``, ``{"barrier": N}`` (just after marker N).
``read_committed`` by default. Partitions are assigned, not subscribed: the
reader knows them (= buckets) and group rebalances are slow on some brokers.

Upsert logs (``log.changelog-mode`` upsert, or auto with a primary key) store
only +I/+U and possibly key-only -D; by default (``normalize=None``) the reader
rebuilds the full changelog from them with a ``Normalizer`` (-U/+U pairs, full
-D rows; bounded state spilled to Arrow IPC). It runs on the rows the barrier
gate releases, so aborted rows never reach its state. ``normalize=False`` gives
the stored records as they are. A truncate record is a ``Truncated`` event in
its place (rows of its partition released before it are removed); a normalizing
reader first gives the full -D of every row of that partition it holds (a
``DataBatch`` at the truncate's offset), so its changelog alone says what the
truncate removed, and the first change of a key after it is a +I. Other partitions'
rows stay in its state (their truncate records come when they come). A reader that starts mid-log knows nothing of
earlier rows: the first change of a key it sees is a +I (hybrid reads start
from a snapshot whose rows the caller already has).

A timestamp start seeks with ``offsets_for_times`` and also skips, per
partition, the records before the first one whose timestamp reaches the start
time: the broker's answer is a lower bound (some Kafka-compatible brokers answer
0), so this is exact on any of them. Every other record read is released:
``read_committed`` never hands over aborted ones, and other producers' records
belong to the barrier of the marker after them.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import pyarrow as pa
from confluent_kafka import OFFSET_END, Consumer, KafkaError, TopicPartition

from logstore.client_config import confluent_config
from logstore.codec import decode_columns
from logstore.dlq import DeadLetterQueue
from logstore.errors import (
    BarrierNotFoundError,
    DecodeError,
    LogStoreError,
    OffsetsExpiredError,
)
from logstore.gate import BarrierGate, BarrierPassed, DataBatch, Event, Truncated
from logstore.normalize import Normalizer, at_truncate
from logstore.scan import group_refused, scan_range
from logstore.spec import BARRIER_COLUMN, OFFSET_COLUMN, PARTITION_COLUMN, LogSpec
from logstore.unavailable import UNFILLABLE
from logstore.watermarks import watermark

Start = str | dict[str, Any]

__all__ = ["BarrierPassed", "DataBatch", "Event", "LogReader", "Truncated"]


class LogReader:
    """Iterate ``DataBatch`` / ``BarrierPassed`` events of a table's log.

    ``until_barrier=N`` stops every partition exactly at marker N (rows of barriers
    <= N only). ``stop_at_end`` stops once every partition reached its end.
    ``idle_timeout_s`` stops (or, with ``until_barrier``, raises) after that long
    without any record. ``lenient`` routes bad records to ``<topic>.dlq``.
    ``normalize``: None (default) normalizes upsert logs only, True forces it (needs a
    primary key), False never; ``normalize_state_rows`` and ``spill_dir`` bound the
    normalizer's in-memory state (the rest spills to Arrow IPC files there).

    Args:
        bootstrap: Kafka's bootstrap servers (client settings: ``DTS_KAFKA_CONFIG``).
        spec: the table's log.
        start: where to start (see the module: earliest, latest, a time, offsets, a barrier).
        until_barrier: stop every partition at this barrier's marker.
        isolation: ``read_committed`` (whole barriers only) or ``read_uncommitted``.
        lenient: send bad records to the dead-letter topic instead of raising.
        partitions: the partitions read (None: all).
        stop_at_end: stop once every partition reached its end.
        idle_timeout_s: stop after this long without a record.
        max_records: records fetched per poll.
        consumer_config: librdkafka settings over the reader's.
        normalize: read an upsert log as a full changelog (None: upsert logs only).
        normalize_state_rows: rows of normalizer state kept in memory.
        spill_dir: where the rest of that state spills.

    Raises:
        OffsetsExpiredError: a start offset is below the log's retention.
        BarrierNotFoundError: the start barrier's marker has expired.
        DecodeError: (iterating) a bad record when not ``lenient``.

    Example:
        >>> from logstore.reader import DataBatch, LogReader
        >>> reader = LogReader("127.0.0.1:9092", spec, until_barrier=1764320000000)
        >>> rows = sum(e.table.num_rows for e in reader if isinstance(e, DataBatch))
    """

    def __init__(
        self,
        bootstrap: str,
        spec: LogSpec,
        start: Start = "earliest",
        until_barrier: int | None = None,
        isolation: str = "read_committed",
        lenient: bool = False,
        partitions: list[int] | None = None,
        stop_at_end: bool = False,
        idle_timeout_s: float | None = None,
        max_records: int = 20_000,
        consumer_config: dict[str, Any] | None = None,
        normalize: bool | None = None,
        normalize_state_rows: int = 1_000_000,
        spill_dir: str | None = None,
    ) -> None:
        self.spec = spec
        self.bootstrap = bootstrap
        self.partitions = list(range(spec.buckets)) if partitions is None else sorted(partitions)
        self.until_barrier = until_barrier
        self.lenient = lenient
        self.stop_at_end = stop_at_end
        self.idle_timeout_s = idle_timeout_s
        self.max_records = max_records
        config = confluent_config(
            bootstrap,
            {"fetch.wait.max.ms": 100, "log_level": 3},
            {
                "group.id": f"dts-reader-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": isolation,
                "enable.partition.eof": True,
                **(consumer_config or {}),
            },
        )
        self._consumer = Consumer(config)
        self.gate = BarrierGate(hold=spec.transactional, until_barrier=until_barrier)
        self.dlq = DeadLetterQueue(bootstrap, spec) if lenient else None
        if normalize is None:
            normalize = spec.effective_changelog_mode == "upsert"
        self.normalizer = (
            Normalizer(
                spec,
                max_rows_in_memory=normalize_state_rows,
                spill_dir=spill_dir,
                partition_column=PARTITION_COLUMN,
            )
            if normalize
            else None
        )
        self._seek_ts: dict[int, int] = {}
        self._closed = False
        self._assign(start)

    # ------------------------------------------------------------------ start

    def _watermarks(self, p: int) -> tuple[int, int]:
        return watermark(self._consumer, self.spec.topic, p)

    def _assign(self, start: Start) -> None:
        topic = self.spec.topic
        offsets: dict[int, int]
        if start == "earliest":
            offsets = {p: self._watermarks(p)[0] for p in self.partitions}
        elif start == "latest":
            # OFFSET_END resolves to the last stable offset under read_committed, so an
            # open barrier is read whole once it commits, never from its middle
            offsets = {p: OFFSET_END for p in self.partitions}
        elif isinstance(start, dict) and "timestamp" in start:
            ts = int(start["timestamp"])
            found = self._consumer.offsets_for_times(
                [TopicPartition(topic, p, ts) for p in self.partitions], timeout=10
            )
            offsets = {}
            for tp in found:
                low, _ = self._watermarks(tp.partition)
                offsets[tp.partition] = OFFSET_END if tp.offset < 0 else max(tp.offset, low)
                self._seek_ts[tp.partition] = ts
        elif isinstance(start, dict) and "offsets" in start:
            given = {int(p): int(o) for p, o in start["offsets"].items()}
            offsets = {}
            for p in self.partitions:
                low, _ = self._watermarks(p)
                o = given.get(p, low)
                if o < low:
                    raise OffsetsExpiredError(topic, p, o, low)
                offsets[p] = o
        elif isinstance(start, dict) and "barrier" in start:
            offsets = self._offsets_after_barrier(int(start["barrier"]))
        else:
            raise LogStoreError(
                f"unknown start {start!r}: use 'earliest', 'latest', {{'timestamp': ms}}, "
                "{'offsets': {partition: offset}} or {'barrier': N}"
            )
        for p, o in offsets.items():
            # the gate learns where each partition starts, so positions() is complete
            if o >= 0:
                self.gate.state(p).next_offset = o
        self._consumer.assign([TopicPartition(topic, p, o) for p, o in offsets.items()])

    def _offsets_after_barrier(self, barrier: int) -> dict[int, int]:
        """Scan each partition for marker ``barrier``; the offsets just after it."""
        topic = self.spec.topic
        out: dict[int, int] = {}
        for p in self.partitions:
            low, high = self._watermarks(p)
            scan = scan_range(self._consumer, topic, {p: (low, high)}, timeout_s=60)
            with contextlib.closing(scan):  # stopping at the marker unassigns the consumer
                for e in scan:
                    if e.marker is not None and e.marker.barrier == barrier:
                        out[p] = e.offset + 1
                        break
            if p not in out:
                raise BarrierNotFoundError(
                    f"{topic}[{p}]: no marker for barrier {barrier} in offsets {low}..{high}; it may "
                    "have expired (log.retention): start from the FileStore snapshot of that barrier"
                )
        return out

    # ------------------------------------------------------------------ iterate

    def __iter__(self) -> Iterator[Event]:
        at_end: set[int] = set()
        last_data = time.monotonic()
        while not self._closed:
            if self.until_barrier is not None and self.gate.finished(self.partitions):
                return
            if self.stop_at_end and at_end.issuperset(
                p for p in self.partitions if not self.gate.state(p).done
            ):
                return
            msgs = self._consumer.consume(num_messages=self.max_records, timeout=0.5)
            if not msgs:
                if (
                    self.idle_timeout_s is not None
                    and time.monotonic() - last_data > self.idle_timeout_s
                ):
                    if self.until_barrier is not None:
                        raise LogStoreError(
                            f"{self.spec.topic}: barrier {self.until_barrier} not reached on every "
                            f"partition within {self.idle_timeout_s:.0f}s of inactivity"
                        )
                    return
                continue
            last_data = time.monotonic()
            records = self._records(msgs, at_end)
            if self._seek_ts:
                records = self._skip_before_start_time(records)
            if records:
                yield from self._decode(records)

    def _records(self, msgs: list[Any], at_end: set[int]) -> list[Any]:
        """Data messages of a consume() batch; tracks which partitions sit at their end.

        One cheap pass finds the (rare) error/EOF events; per-message work beyond
        that is left to the list comprehensions of ``_decode``.
        """
        events = [i for i, m in enumerate(msgs) if m.error() is not None]
        if not events:
            at_end.difference_update({m.partition() for m in msgs})
            return msgs
        # the reader never joins nor commits its group: a refusal of it is no error
        events = [i for i in events if not group_refused(msgs[i])]
        for i in events:
            err = msgs[i].error()
            if err.code() != KafkaError._PARTITION_EOF:
                raise LogStoreError(f"{self.spec.topic}: consumer error: {err}")
        last_event = {int(msgs[i].partition() or 0): i for i in events}
        records = [m for m in msgs if m.error() is None]
        last_data = {m.partition(): i for i, m in enumerate(msgs) if m.error() is None}
        for p, i in last_data.items():
            if last_event.get(p, -1) < i:
                at_end.discard(p)
        for p, i in last_event.items():
            if last_data.get(p, -1) < i:
                at_end.add(p)
        return records

    def _skip_before_start_time(self, msgs: list[Any]) -> list[Any]:
        out = []
        for m in msgs:
            ts = self._seek_ts.get(m.partition())
            if ts is not None:
                if m.timestamp()[1] < ts:
                    continue
                del self._seek_ts[m.partition()]
            out.append(m)
        return out

    def _decode(self, msgs: list[Any]) -> list[Event]:
        decoded = decode_columns(
            self.spec,
            [m.partition() for m in msgs],
            [m.offset() for m in msgs],
            [m.key() for m in msgs],
            [m.value() for m in msgs],
            [m.headers() for m in msgs],
            lenient=self.lenient,
        )
        if decoded.errors and self.dlq is not None:
            self.dlq.send(decoded.errors)
            self.dlq.flush()
        events = self.gate.push(decoded)
        if self.normalizer is None:
            return events
        out: list[Event] = []
        for ev in events:
            if isinstance(ev, DataBatch):
                rows = self.normalizer.process(ev.table)
                self._refuse_unresolved()
                if rows.num_rows:
                    out.append(DataBatch(rows))
            elif isinstance(ev, Truncated):
                # the partition is emptied: its rows leave the changelog as -D rows
                removed = self.normalizer.retract_partition(ev.partition)
                if removed.num_rows:
                    out.append(DataBatch(_removed_at(removed, ev)))
                out.append(ev)
            else:
                out.append(ev)
        return out

    def _refuse_unresolved(self) -> None:
        """A placeholder (log.unavailable-values=keep-current) whose key this reader has
        no value for: the reader started after the key's last whole row."""
        assert self.normalizer is not None
        bad = self.normalizer.unresolved
        if bad is None:
            return
        raise DecodeError(
            self.spec.topic,
            int(bad.column(PARTITION_COLUMN)[0].as_py()),
            int(bad.column(OFFSET_COLUMN)[0].as_py()),
            f"{UNFILLABLE}; a log reader that starts later than the key's last whole row "
            "cannot know the value: read the table (FileStore) and then its log, as a "
            "stitched Spark read does, or the log from its earliest offset",
        )

    # ------------------------------------------------------------------ misc

    @property
    def dlq_count(self) -> int:
        return self.dlq.count if self.dlq is not None else 0

    def positions(self) -> dict[int, int]:
        """Per partition, the offset just after the last barrier marker passed.

        Returns:
            ``{partition: offset}``, where a reader resumes after that barrier.
        """
        return self.gate.positions()

    def read_all(self) -> tuple[list[DataBatch], list[BarrierPassed]]:
        """Drain the reader (needs until_barrier, stop_at_end or idle_timeout_s).

        Returns:
            The data batches and the barriers passed, in the order read.

        Raises:
            LogStoreError: the log holds a truncation (iterate to see it).
        """
        data: list[DataBatch] = []
        barriers: list[BarrierPassed] = []
        for ev in self:
            if isinstance(ev, Truncated):
                raise LogStoreError(
                    f"{self.spec.topic}: partition {ev.partition} was truncated at offset "
                    f"{ev.offset}; read_all() cannot return it, iterate the reader instead"
                )
            (data if isinstance(ev, DataBatch) else barriers).append(ev)  # type: ignore[arg-type]
        return data, barriers

    def close(self) -> None:
        """Close the consumer (and the dead-letter producer, flushed)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.dlq is not None:
                self.dlq.close()
        finally:
            if self.normalizer is not None:
                self.normalizer.close()
            self._consumer.close()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _removed_at(removed: pa.Table, ev: Truncated) -> pa.Table:
    """The -D rows of a truncate, with the columns a released batch carries."""
    barrier = pa.repeat(pa.scalar(ev.barrier, pa.int64()), removed.num_rows)
    return at_truncate(removed, ev.partition, ev.offset).append_column(BARRIER_COLUMN, barrier)
