"""Copy external Debezium topics into their tables' logs, adding barriers, exactly once.

The topics of one source database go through one ingest: every barrier is closed on
every table's log in one Kafka transaction, under one id, and (with the transaction
topic) never inside a source transaction, so barrier B of each table holds the same
committed source transactions.

Consume-transform-produce: source records are decoded (debezium-json, also
with ``schema-include``), re-encoded for the table (partition = bucket) and
written by a transactional LogWriter; at every barrier the consumer's offsets
are committed inside the same transaction (``send_offsets_to_transaction``),
so after a crash the copy resumes exactly where the last barrier ended.
Bad source records go to ``<source topic>.dlq`` in lenient mode (at least
once: the dead-letter producer is not part of the transaction). Otherwise the
first bad record ends the run: everything before it is committed (the source
offset of its partition stops at it) and ``BadSourceRecord`` names it.

A Debezium truncate (``op: "t"``) becomes a truncate record on every partition
of the log (``LogWriter.truncate``), in arrival order among the records around it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, TopicPartition

from logstore.codec import Bucketer, Decoded, decode_columns
from logstore.completed_log import (
    completed_topic,
    encode_completed,
    ensure_completed_topic,
    read_completed,
)
from logstore.consumer_close import close_consumers
from logstore.dlq import DeadLetterQueue
from logstore.errors import (
    BadSourceRecord,
    DecodeError,
    LogSpecError,
    LogStoreError,
    SourceSchemaChanged,
)
from logstore.ingest_sources import (
    IngestSource,
    IngestStats,
    LazyField,
    SourceBatch,
    SourceState,
    assigned_consumer,
    source_spec,
)
from logstore.spec import DecimalMode, LogSpec
from logstore.transactions import (
    DONE_KEPT,
    TransactionTracker,
    collection_names,
    transaction_events,
)
from logstore.writer import LogWriter

log = logging.getLogger(__name__)


class Ingestor:
    """Source topics -> table logs. ``run()`` until stopped, idle or done.

    One source topic is today's single-table ingest; ``more`` adds the other tables of
    the same source database. All of them are written in one Kafka transaction per
    barrier (``LogWriter(also=...)``), so barrier B of every table holds the same source
    records, and with the ``transaction_topic`` no barrier splits a source transaction
    across the tables: a consistent read at B shows the database at one committed
    transaction.
    """

    def __init__(
        self,
        bootstrap: str,
        source_topic: str,
        spec: LogSpec,
        bucketer: Bucketer,
        group_id: str | None = None,
        transactional_id: str | None = None,
        barrier_interval_s: float = 1.0,
        lenient: bool = False,
        max_records: int = 20_000,
        decimal_mode: DecimalMode = "precise",
        transaction_topic: str | None = None,
        more: Sequence[IngestSource] = (),
        collection: str | None = None,
    ) -> None:
        """``transaction_topic``: Debezium's transaction topic (``<prefix>.transaction``);
        with it barriers close only where no source transaction is open. ``collection``:
        the first topic's table as Debezium names it (see ``IngestSource``)."""
        given = [IngestSource(source_topic, spec, bucketer, collection), *more]
        for g in given:
            if not g.spec.transactional:
                raise LogSpecError(
                    f"{g.spec.topic}: exactly-once ingest needs log.consistency=transactional"
                )
        topics = [g.topic for g in given]
        if len(set(topics)) != len(topics):
            raise LogStoreError(f"a source topic is given twice: {topics}")
        self.source_topic = source_topic
        self.spec = spec
        self.barrier_interval_s = barrier_interval_s
        self.max_records = max_records
        self.stats = IngestStats()
        # the figures at the last committed barrier (what a restart does not copy again)
        self.committed = IngestStats()
        self.group_id = group_id or f"dts-ingest-{spec.topic}"
        self.sources = {
            g.topic: SourceState(
                g.topic,
                g.spec,
                source_spec(g.spec, g.topic, decimal_mode),
                DeadLetterQueue(bootstrap, source_spec(g.spec, g.topic, decimal_mode))
                if lenient
                else None,
            )
            for g in given
        }
        self._consumer = assigned_consumer(bootstrap, topics, self.group_id)
        self._offsets: dict[tuple[str, int], int] = {}
        self.transaction_topic = transaction_topic
        self.txns: TransactionTracker | None = None
        self._txn_consumer: Consumer | None = None
        if transaction_topic is not None:
            self.txns = TransactionTracker()
            for g in given:
                if g.collection is not None:
                    self.txns.name(g.topic, {g.collection})
                    self.sources[g.topic].named = True
                elif more:  # several tables: none is whole before this one's is known
                    self.txns.unnamed.add(g.topic)
            self._txn_consumer = assigned_consumer(bootstrap, [transaction_topic], self.group_id)
        self.writer = LogWriter(
            bootstrap,
            spec,
            bucketer,
            transactional_id=transactional_id or f"dts-ingest-{spec.topic}",
            barrier_interval_s=None,  # barriers are closed here, with the source offsets
            also=[(g.spec, g.bucketer) for g in more],
        )
        self.lenient = lenient
        # the transactions earlier runs completed (after the writer fenced a crashed run's
        # open barrier): a restarted connector's repeats of them are dropped
        self._completed_topic: str | None = None
        if self.txns is not None:
            self._completed_topic = completed_topic(self.group_id)
            ensure_completed_topic(bootstrap, self._completed_topic)
            self.txns.remember(read_completed(bootstrap, self._completed_topic, DONE_KEPT))

    def run(
        self,
        stop: threading.Event | None = None,
        idle_exit_s: float | None = None,
        on_barrier: Callable[[IngestStats], None] | None = None,
    ) -> IngestStats:
        stop = stop or threading.Event()
        last_barrier = last_data = time.monotonic()
        pending = False
        try:
            while not stop.is_set():
                self._read_transactions()
                msgs = self._consumer.consume(num_messages=self.max_records, timeout=0.2)
                due = pending and time.monotonic() - last_barrier >= self.barrier_interval_s
                if msgs:
                    stopped_at, cut = self._process(msgs, due, on_barrier)
                    pending = True
                    last_data = time.monotonic()
                    if cut:
                        last_barrier = last_data
                    if stopped_at is not None:
                        self._barrier(on_barrier)  # what came before it, exactly once
                        raise stopped_at
                now = time.monotonic()
                waited = now - last_barrier
                if pending and waited >= self.barrier_interval_s and self._may_close(waited):
                    self._barrier(on_barrier)
                    pending, last_barrier = False, now
                if idle_exit_s is not None and now - last_data >= idle_exit_s:
                    break
            if pending and (self.txns is None or self.txns.all_complete()):
                self._barrier(on_barrier)
            elif pending:  # a source transaction is still open: redo it on the next run
                self.writer.abort()
        except (BadSourceRecord, SourceSchemaChanged):
            raise  # its barrier is committed: nothing to abort
        except BaseException:
            self.writer.abort()  # nothing of the open barrier is visible, offsets not moved
            raise
        return self.stats

    def _read_transactions(self) -> None:
        if self._txn_consumer is None or self.txns is None:
            return
        msgs = self._txn_consumer.consume(num_messages=10_000, timeout=0)
        records = [
            (int(m.partition() or 0), int(m.offset() or 0), m.value())
            for m in msgs
            if m.error() is None
        ]
        self.txns.on_transaction_events(records)

    def _may_close(self, waited_s: float) -> bool:
        """Whether a barrier may close now: no source transaction is open (or one has
        kept it open so long that the log's Kafka transaction would time out)."""
        if self.txns is None or self.txns.all_complete():
            return True
        if waited_s < _MAX_DEFER_S:
            return False
        log.warning(
            "%s: source transactions %s still open after %.0fs (their END events missing "
            "from %s?); closing the barrier inside them",
            ", ".join(self.sources),
            sorted(self.txns.written)[:5],
            waited_s,
            self.transaction_topic,
        )
        self.stats.split_transactions += 1
        return True

    def _process(
        self,
        msgs: list[Any],
        barrier_due: bool = False,
        on_barrier: Callable[[IngestStats], None] | None = None,
    ) -> tuple[DecodeError | None, bool]:
        """Copy a batch; returns the record the copy stopped before, if it stopped
        (a bad record in strict mode, a record with new columns), and whether a barrier
        was closed inside the batch (at a source transaction boundary, when due)."""
        good = msgs
        events = [m for m in msgs if m.error() is not None]
        if events:
            for m in events:
                if m.error().code() != KafkaError._PARTITION_EOF:
                    raise LogStoreError(f"{m.topic()}: consumer error: {m.error()}")
            good = [m for m in msgs if m.error() is None]
        by_topic: dict[str, list[int]] = {}
        for i, m in enumerate(good):
            by_topic.setdefault(m.topic(), []).append(i)
        stop: DecodeError | None = None
        batches = []
        for topic, arrival in by_topic.items():
            batch, stopped = self._decode_source(self.sources[topic], good, arrival)
            batches.append(batch)
            stop = stop or stopped  # the run ends after this batch's barrier either way
        cut = None
        if self.txns is not None and batches:
            order = np.argsort(np.concatenate([b.arrival for b in batches]), kind="stable")
            ids = pa.concat_arrays([b.ids for b in batches if b.ids is not None]).take(order)
            orders = pa.concat_arrays([b.orders for b in batches if b.orders is not None])
            orders = orders.take(order)
            arrivals = np.concatenate([b.arrival for b in batches])[order]
            cut = self.txns.cut(ids, orders) if barrier_due else None
            if cut is not None:  # close the due barrier at the last clean boundary
                until = int(arrivals[cut]) if cut < len(arrivals) else len(good)
                for b in batches:
                    self._copy(b, b.arrival < until)
                    rest = b.arrival >= until
                    b.parts, b.offs, b.repeated = b.parts[rest], b.offs[rest], b.repeated[rest]
                    b.arrival = b.arrival[rest]
                self.txns.record(ids[:cut], orders[:cut])
                self._barrier(on_barrier)
                ids, orders = ids[cut:], orders[cut:]
            self.txns.record(ids, orders)
        for b in batches:
            self._copy(b, np.ones(len(b.parts), dtype=bool))
        return stop, cut is not None

    def _decode_source(
        self, source: SourceState, good: list[Any], arrival: list[int]
    ) -> tuple[SourceBatch, DecodeError | None]:
        """Decode one topic's records of a batch and settle its bad ones: dead letters,
        or (strict) each partition stops at its first bad record."""
        msgs = [good[i] for i in arrival]
        stop: DecodeError | None = None
        try:
            decoded, parts, offs, values = self._decode(source, msgs)
        except SourceSchemaChanged as exc:  # copy what precedes it, then stop there
            stop, msgs, arrival = exc, msgs[: exc.index], arrival[: exc.index]
            decoded, parts, offs, values = self._decode(source, msgs)
        self.stats.skipped += decoded.skipped
        kept = np.ones(len(parts), dtype=bool)
        all_ids = parts << 40 | offs  # one id per record, before any is dropped
        stops = {stop.partition: stop.offset} if stop is not None else {}
        if decoded.errors and source.dlq is not None:
            self.stats.dead_letters += source.dlq.send(decoded.errors)
            source.dlq.flush()
        elif decoded.errors:
            first = decoded.errors[0]  # the first in (partition, offset) order
            stop = BadSourceRecord(source.topic, first.partition, first.offset, first.reason)
            for e in decoded.errors:  # every partition stops at its first bad record
                stops[e.partition] = min(stops.get(e.partition, e.offset), e.offset)
        for p, o in stops.items():
            kept &= (parts != p) | (offs < o)
        for p, o in stops.items():  # the source offset stops exactly at that record
            self._offsets[(source.topic, p)] = o
        batch = SourceBatch(source, decoded, parts[kept], offs[kept], np.asarray(arrival)[kept])
        batch.repeated = np.zeros(len(batch.parts), dtype=bool)
        if self.txns is not None:
            ids, orders = self._transaction_events(source, values, all_ids, decoded)
            ids, orders = ids.filter(pa.array(kept)), orders.filter(pa.array(kept))
            # a restarted connector's repeats: consumed, never written, no transaction's
            batch.repeated = self.txns.redelivered(ids)
            self.stats.redelivered += int(batch.repeated.sum())
            none = pa.nulls(len(ids), ids.type)
            batch.ids = pc.if_else(pa.array(batch.repeated), none, ids)
            batch.orders = orders
        return batch, stop

    def _transaction_events(
        self, source: SourceState, raw: list[Any], ids: np.ndarray, decoded: Decoded
    ) -> tuple[pa.Array, pa.Array]:
        """The records' source transaction ids and orders in them (null for dead
        letters: not JSON)."""
        assert self.txns is not None
        values = pa.array(raw, pa.large_binary())
        empty = pa.scalar(b"{}", pa.large_binary())
        if decoded.errors:
            bad = np.isin(ids, [e.partition << 40 | e.offset for e in decoded.errors])
            values = pc.if_else(pa.array(bad), empty, values)
        values = pc.fill_null(values, empty)
        if not source.named:  # which of a transaction's events are this ingest's tables'
            for v in values.slice(0, 100).to_pylist():
                if v and (names := collection_names(v)):
                    self.txns.name(source.topic, names)
                    source.named = True
                    break
        return transaction_events(values)

    def _copy(self, batch: SourceBatch, which: np.ndarray) -> None:
        """Write the rows of these records of a batch (not the repeats of a restarted
        connector); their offsets are consumed."""
        parts, offs = batch.parts[which], batch.offs[which]
        new = ~batch.repeated[which]
        self._write_in_order(batch.source, batch.decoded, parts[new], offs[new])
        self.stats.records += len(parts)
        for p in np.unique(parts).tolist():
            last = int(offs[parts == p].max()) + 1
            key = (batch.source.topic, p)
            self._offsets[key] = max(self._offsets.get(key, 0), last)

    def _decode(
        self, source: SourceState, msgs: list[Any]
    ) -> tuple[Decoded, np.ndarray, np.ndarray, list[Any]]:
        """Decode messages; also their partitions, offsets and values as arrays."""
        parts = [m.partition() for m in msgs]
        offs = [m.offset() for m in msgs]
        values = [m.value() for m in msgs]
        decoded = decode_columns(
            source.src_spec,
            parts,
            offs,
            LazyField(msgs, "key"),  # keys and headers are read only for the few records
            values,  # that need them (tombstones, key-only deletes,
            LazyField(msgs, "headers"),  # dead letters): not one call per record
            lenient=True,  # bad records are handled here: dead letters or a clean stop
        )
        return (
            decoded,
            np.array(parts, dtype=np.int64),
            np.array(offs, dtype=np.int64),
            values,
        )

    def _write_in_order(
        self, source: SourceState, decoded: Decoded, parts: np.ndarray, offs: np.ndarray
    ) -> None:
        """Write the decoded rows of the records kept (``parts``/``offs``, in arrival
        order), with a truncate in the log where a truncate arrived."""
        if len(parts) == 0:
            return
        ids = parts << 40 | offs  # one sortable id per source record
        order = np.argsort(ids, kind="stable")
        table = decoded.table
        row_ids = table.column("_partition").to_numpy().astype(np.int64) << 40 | table.column(
            "_offset"
        ).to_numpy().astype(np.int64)
        at = np.searchsorted(ids[order], row_ids)
        found = (at < len(ids)) & (ids[order][np.minimum(at, len(ids) - 1)] == row_ids)
        position = np.where(found, order[np.minimum(at, len(ids) - 1)], -1)  # -1: not kept
        cuts = sorted(
            int(order[i])
            for tr in decoded.truncates
            if (i := int(np.searchsorted(ids[order], tr.partition << 40 | tr.offset))) < len(ids)
            and ids[order][i] == tr.partition << 40 | tr.offset
        )
        rows = table.drop_columns(["_partition", "_offset"])
        low = 0
        for cut in [*cuts, len(ids)]:
            chunk = rows.filter(pa.array((position >= low) & (position < cut)))
            if chunk.num_rows:
                self.writer.write(chunk, source.spec.topic)
                self.stats.rows += chunk.num_rows
            if cut < len(ids):
                self.writer.truncate(source.spec.topic)
                self.stats.truncates += 1
            low = cut

    def _barrier(self, on_barrier: Callable[[IngestStats], None] | None) -> None:
        offsets = [TopicPartition(t, p, o) for (t, p), o in sorted(self._offsets.items())]
        if self.txns is not None and self.transaction_topic is not None:
            offsets += [
                TopicPartition(self.transaction_topic, p, o)
                for p, o in sorted(self.txns.safe_offsets().items())
            ]
        completed = self.txns.take_completed() if self.txns is not None else []
        try:
            if completed and self._completed_topic is not None:
                self.writer.write_state(self._completed_topic, encode_completed(completed))
            self.stats.last_barrier = self.writer.barrier(
                source_offsets=offsets, group_metadata=self._consumer.consumer_group_metadata()
            )
        except BaseException:
            if self.txns is not None:  # not committed: the next barrier records them
                self.txns.completed[:0] = completed
            raise
        self.stats.barriers += 1
        self.committed = dataclasses.replace(self.stats)
        if on_barrier is not None:
            on_barrier(self.stats)

    def close(self) -> None:
        try:
            self.writer.close(final_barrier=False)
            for source in self.sources.values():
                if source.dlq is not None:
                    source.dlq.close()
        finally:
            # the positions went into the barriers' Kafka transactions: closing commits
            # nothing, and must not hold up a stop (librdkafka#3740)
            consumers = {f"{self.group_id}: sources": self._consumer}
            if self._txn_consumer is not None:
                consumers[f"{self.group_id}: transactions"] = self._txn_consumer
            close_consumers(consumers)


# a barrier waits at most this long for a source transaction to end: the log's Kafka
# transaction (transaction.timeout.ms 60 s) must commit before the broker aborts it
_MAX_DEFER_S = 30.0


__all__ = ["IngestSource", "IngestStats", "Ingestor", "source_spec"]
