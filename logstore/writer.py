"""LogWriter: writes a table's changelog to its topic, closing barriers.

``transactional``: one Kafka transaction per barrier holding that barrier's
records and its markers on every partition; readers with ``read_committed``
see a barrier all at once or not at all. A new writer with the same
``transactional.id`` fences the old one. ``eventual``: idempotent producer,
records visible at once, markers still delimit barriers.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from logstore.acls import refusal
from logstore.client_config import confluent_config
from logstore.codec import TRUNCATE_VALUE, Bucketer
from logstore.encode import encode_batch
from logstore.errors import (
    BarrierError,
    LogScanError,
    WriterError,
    WriterFencedError,
    WriterNotAuthorizedError,
    WriterStuckError,
    WriterTransientError,
)
from logstore.kafka_failures import is_fenced, is_transient
from logstore.markers import marker_headers, next_barrier_id
from logstore.producer_transactions import SEND_OFFSETS_S, send_offsets, transaction_cause
from logstore.scan import last_barrier_on_topic
from logstore.spec import LogSpec
from logstore.topics import ensure_topic

__all__ = ["LogWriter"]  # the public API (docs/reference)

# Producer settings of every LogWriter (``producer_config`` overrides them); the
# benchmark's raw-producer baseline uses the same ones.
PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 1_000_000,
    "compression.type": "lz4",
    "log_level": 3,
}


def default_transactional_id(spec: LogSpec) -> str:
    """One writer per table: restarting it fences its predecessor."""
    return f"dts-writer-{spec.topic}"


#: how long one commit_transaction call may take; how many calls a barrier gets
COMMIT_TIMEOUT_S = 60.0
COMMIT_ATTEMPTS = 3


class LogWriter:
    """Writes rows (with optional ``_row_kind``) and barrier markers to a table's topic.

    ``bucketer(rows) -> bucket ids`` must be the FileStore's bucket hash so that
    partition = bucket on both tiers (``bridge`` injects it). ``barrier_interval_s``
    closes barriers automatically from a background thread; ``None`` or 0 turns that off.

    ``also``: more tables written in the same Kafka transactions (``write(rows, topic)``):
    every barrier is closed on every table's log at once, under one id, so barrier B of
    each table holds the same writes (one source database's tables, ``dts ingest`` of
    several topics). All of them transactional.

    Args:
        bootstrap: Kafka's bootstrap servers (client settings: ``DTS_KAFKA_CONFIG``).
        spec: the table's log.
        bucketer: rows -> bucket ids (the FileStore's bucket hash).
        transactional_id: the producer's id (None: one per table, so a restarted writer
            fences its predecessor).
        barrier_interval_s: seconds between automatic barriers (None or 0: only
            `barrier()` closes them).
        producer_config: librdkafka settings over the writer's defaults.
        create_topic: create the topics that do not exist yet.
        clock_ms: the clock barrier ids come from (epoch ms).
        also: more tables, ``(spec, bucketer)``, written in the same transactions.

    Raises:
        WriterNotAuthorizedError: an ACL is missing; it names it.
        WriterError: the producer cannot start, or a table in ``also`` is not
            transactional.

    Example:
        >>> from bridge.tables import open_log_writer  # the table's spec and bucket hash
        >>> w = open_log_writer(catalog.get_table("db.orders"), "127.0.0.1:9092")
        >>> w.write(rows)  # an Arrow table of the table's columns
        1000
        >>> w.barrier()  # the worker commits one snapshot for it
        1764320000000
        >>> w.close()
    """

    def __init__(
        self,
        bootstrap: str,
        spec: LogSpec,
        bucketer: Bucketer,
        transactional_id: str | None = None,
        barrier_interval_s: float | None = 1.0,
        producer_config: dict[str, Any] | None = None,
        create_topic: bool = True,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        also: Sequence[tuple[LogSpec, Bucketer]] = (),
    ) -> None:
        self.spec = spec
        self.bootstrap = bootstrap
        self._bucketer = bucketer
        self.tables: dict[str, tuple[LogSpec, Bucketer]] = {spec.topic: (spec, bucketer)}
        for other, other_bucketer in also:
            if not (spec.transactional and other.transactional):
                raise WriterError(
                    f"{other.topic}: tables share barriers only in Kafka transactions "
                    "(log.consistency=transactional on every table)"
                )
            self.tables[other.topic] = (other, other_bucketer)
        self._clock_ms = clock_ms
        self._lock = threading.RLock()
        self._closed = False
        self._background_error: BaseException | None = None
        self._in_txn = False
        self._pending_rows = 0
        if create_topic:
            for table_spec, _ in self.tables.values():
                ensure_topic(bootstrap, table_spec)
        config = confluent_config(bootstrap, PRODUCER_DEFAULTS)
        self.transactional_id = None
        if spec.transactional:
            self.transactional_id = transactional_id or default_transactional_id(spec)
            config["transactional.id"] = self.transactional_id
            config["transaction.timeout.ms"] = 60_000
        config.update(producer_config or {})
        self._producer = Producer(config)
        if spec.transactional:
            try:
                # fences any previous writer with this id and aborts its open transaction
                self._producer.init_transactions(30)
            except KafkaException as exc:
                doing = f"{spec.topic}: cannot initialise transactions"
                refused = refusal(exc, doing, self._acls_needed(), WriterNotAuthorizedError)
                # the half-built writer stays reachable from the traceback: its client, left
                # open, would call the broker (maybe gone) until the traceback is collected
                with contextlib.suppress(KafkaException):  # the fatal error, again
                    self._producer.close()
                raise refused or WriterError(f"{doing}: {exc}") from exc
        try:  # an id an earlier writer used, even in an aborted barrier, is never reused
            self.last_barrier = max(
                last_barrier_on_topic(bootstrap, s.topic, s.buckets) or 0
                for s, _ in self.tables.values()
            )
        except LogScanError as exc:
            raise WriterError(str(exc)) from exc
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        if barrier_interval_s:
            self._timer = threading.Thread(
                target=self._barrier_loop,
                args=(barrier_interval_s,),
                name=f"barrier-{spec.topic}",
                daemon=True,
            )
            self._timer.start()

    # ------------------------------------------------------------------ public

    def write(self, table: pa.Table | pa.RecordBatch, topic: str | None = None) -> int:
        """Encode and send rows, in the open barrier.

        Args:
            table: the rows, with an optional ``_row_kind`` column (``+I``, ``-U``, ``+U``,
                ``-D``).
            topic: the log written (None: the first table's).

        Returns:
            The number of Kafka records produced.
        """
        self._check_usable()
        spec, bucketer = self._table(topic)
        enc = encode_batch(table, spec, bucketer, ts_ms=self._clock_ms())
        if not len(enc):
            return 0
        keys = enc.keys.to_pylist()
        values = enc.values.to_pylist()
        parts = enc.partitions.tolist()
        with self._lock:
            self._check_usable()
            self._ensure_txn()
            try:
                self._produce(spec.topic, keys, values, parts)
            except KafkaException as exc:  # e.g. a transaction a refusal failed meanwhile
                raise self._fail(exc) from exc
            self._pending_rows += len(values)
        return len(values)

    def truncate(self, topic: str | None = None) -> None:
        """Empty the table (of log ``topic``, default the first): a truncate record on
        every partition, in the open barrier.

        Rows written before it (this barrier's and every earlier one's) are removed when
        the barrier is committed; rows written after it are the table's new content.

        Args:
            topic: the log truncated (None: the first table's).
        """
        self._check_usable()
        spec, _ = self._table(topic)
        with self._lock:
            self._check_usable()
            self._ensure_txn()
            for p in range(spec.buckets):
                self._producer.produce(spec.topic, TRUNCATE_VALUE, None, p)
            self._producer.poll(0)
            self._pending_rows += spec.buckets

    def write_state(self, topic: str, value: bytes) -> None:
        """One record of the writer's own state to ``topic`` (not a table's log), in the
        open barrier's transaction: committed with the barrier, or aborted with it.

        Args:
            topic: the state topic.
            value: the record's value.
        """
        self._check_usable()
        if not self.spec.transactional:
            raise WriterError(f"{topic}: state records need log.consistency=transactional")
        with self._lock:
            self._check_usable()
            self._ensure_txn()
            self._producer.produce(topic, value)
            self._producer.poll(0)

    def barrier(
        self,
        barrier_id: int | None = None,
        source_offsets: list[TopicPartition] | None = None,
        group_metadata: Any = None,
    ) -> int:
        """Close the current barrier now (markers on every partition); returns its id.

        Without an id the writer takes the ms clock, bumped past the last id it has
        seen; a given id (e.g. a source barrier reused by a streaming sink) must be
        greater than the last one. ``source_offsets`` + ``group_metadata`` (from the
        source consumer) are committed inside the barrier's transaction: exactly-once
        consume-transform-produce.

        Args:
            barrier_id: the id (None: the ms clock, past the last id seen).
            source_offsets: a source consumer's offsets to commit with the barrier.
            group_metadata: that consumer's group metadata.

        Returns:
            The barrier's id.

        Raises:
            BarrierError: the given id is not greater than the last one.
        """
        self._check_usable()
        with self._lock:
            if barrier_id is None:
                barrier_id = next_barrier_id(self.last_barrier, self._clock_ms())
            elif barrier_id <= self.last_barrier:
                raise BarrierError(
                    f"{self.spec.topic}: barrier {barrier_id} is not greater than the last "
                    f"barrier {self.last_barrier}; ids must strictly increase"
                )
            try:
                self._close_barrier(barrier_id, source_offsets, group_metadata)
            except KafkaException as exc:
                raise self._fail(exc) from exc
            self.last_barrier = barrier_id
            self._pending_rows = 0
            return barrier_id

    def abort(self) -> None:
        """Abort the open barrier: none of its records become visible."""
        with self._lock:
            if self._in_txn:
                try:
                    self._producer.abort_transaction(30)
                finally:
                    self._in_txn = False
                    self._pending_rows = 0

    def close(self, final_barrier: bool = True) -> None:
        """Stop the barrier timer; close a last barrier when rows are pending (or abort them).

        Args:
            final_barrier: close a last barrier (False: abort what is pending).
        """
        if self._closed:
            return
        self._stop.set()
        if self._timer is not None:
            self._timer.join(timeout=30)
        try:
            if self._background_error is None:
                if final_barrier and (self._pending_rows or self._in_txn):
                    self.barrier()
                elif self._in_txn:
                    self.abort()
                self._producer.flush(30)
        finally:
            self._closed = True

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self._stop.set()
            with contextlib.suppress(KafkaException):
                self.abort()
            self.close(final_barrier=False)
        else:
            self.close()

    # ------------------------------------------------------------------ internals

    def _table(self, topic: str | None) -> tuple[LogSpec, Bucketer]:
        if topic is None:
            return self.spec, self._bucketer
        found = self.tables.get(topic)
        if found is None:
            raise WriterError(f"{topic}: not a log this writer writes ({', '.join(self.tables)})")
        return found

    def _produce(self, topic: str, keys: list[Any], values: list[Any], parts: list[int]) -> None:
        produce = self._producer.produce
        for k, v, p in zip(keys, values, parts, strict=True):
            while True:
                try:
                    produce(topic, v, k, p)
                    break
                except BufferError:  # local queue full: let deliveries drain
                    self._producer.poll(0.05)
        self._producer.poll(0)

    def _markers(self, barrier_id: int) -> None:
        """The barrier's marker on every partition of every table's log."""
        for spec, _ in self.tables.values():
            for p in range(spec.buckets):
                self._producer.produce(
                    spec.topic, None, None, p, headers=marker_headers(barrier_id)
                )

    def _check_usable(self) -> None:
        if self._closed:
            raise WriterError(f"{self.spec.topic}: the writer is closed")
        if self._background_error is not None:
            raise WriterError(
                f"{self.spec.topic}: the barrier timer failed: {self._background_error}"
            ) from self._background_error

    def _ensure_txn(self) -> None:
        if self.spec.transactional and not self._in_txn:
            try:
                self._producer.begin_transaction()
            except KafkaException as exc:
                raise self._fail(exc) from exc
            self._in_txn = True

    def _close_barrier(
        self, barrier_id: int, source_offsets: list[TopicPartition] | None, group_metadata: Any
    ) -> None:
        topic = self.spec.topic
        if source_offsets and not self.spec.transactional:
            raise WriterError(
                f"{topic}: committing source offsets with the log needs log.consistency=transactional"
            )
        if self.spec.transactional:
            self._ensure_txn()
            self._markers(barrier_id)
            if source_offsets:
                self._send_offsets(source_offsets, group_metadata)
            self._commit()
            self._in_txn = False
        else:
            self._markers(barrier_id)
            remaining = self._producer.flush(60)
            if remaining:
                raise WriterError(f"{topic}: {remaining} records not delivered within 60s")

    def _commit(self) -> None:
        """commit_transaction, again while Kafka calls the failure retriable (librdkafka's
        contract). A record that failed delivery fails it: ``_fail`` aborts the barrier."""
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                self._producer.commit_transaction(COMMIT_TIMEOUT_S)
                return
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if attempt == COMMIT_ATTEMPTS or not (
                    isinstance(err, KafkaError) and err.retriable()
                ):
                    raise

    def _send_offsets(self, offsets: list[TopicPartition], group_metadata: Any) -> None:
        name = f"send-offsets-{self.spec.topic}"
        if not send_offsets(self._producer, offsets, group_metadata, name):
            # the client is wedged in the call: nothing more may be asked of it (a flush
            # or an abort would hang too); the next writer's init_transactions fences it
            self._closed = True
            self._in_txn = False
            raise WriterStuckError(
                f"{self.spec.topic}: Kafka did not accept the source offsets within "
                f"{SEND_OFFSETS_S:.0f}s (the group coordinator was lost); the open barrier "
                "is aborted when a new writer starts"
            )

    def _fail(self, exc: KafkaException) -> WriterError:
        """Abort the open transaction and turn the client error into ours (for a bare
        ``_STATE``, the error that failed the transaction: asked before the abort)."""
        exc = transaction_cause(self._producer, exc)
        err = exc.args[0] if exc.args else None
        fenced = isinstance(err, KafkaError) and is_fenced(err)
        fatal = isinstance(err, KafkaError) and err.fatal()
        if self._in_txn:
            # a fenced or failed producer cannot abort (the call only times out or
            # fails); the broker aborts its transaction when the new writer initialises
            if not (fenced or fatal):
                with contextlib.suppress(KafkaException):
                    self._producer.abort_transaction(15)
            self._in_txn = False
            self._pending_rows = 0
        doing = f"{self.spec.topic}: barrier aborted, nothing of it is visible"
        refused = refusal(exc, doing, self._acls_needed(), WriterNotAuthorizedError)
        if refused is not None:
            # the aborted transaction leaves librdkafka's producer fatal (INVALID_TXN_STATE):
            # nothing more may be asked of it, a flush on close included
            self._closed = True
            return refused
        if fenced:
            self._closed = True
            return WriterFencedError(
                f"{self.spec.topic}: another writer with transactional id "
                f"{self.transactional_id!r} took over; this writer's open barrier was aborted"
            )
        if fatal:
            # the client refuses every further call (even a flush on close), e.g.
            # INVALID_TXN_STATE when the transaction coordinator died mid-commit; the
            # next writer's init_transactions aborts the open barrier
            self._closed = True
            return WriterStuckError(
                f"{self.spec.topic}: the Kafka client hit a fatal error ({exc}); the "
                "open barrier is aborted when a new writer starts"
            )
        if is_transient(exc):
            # the abort above may itself have failed on the same outage: a fresh writer's
            # init_transactions is the one certain way to a clean transaction state
            self._closed = True
            return WriterTransientError(
                f"{doing}: a broker failure Kafka recovers from ({exc}); a new writer "
                "resumes at the last barrier"
            )
        return WriterError(f"{doing}: {exc}")

    def _acls_needed(self) -> dict[str, str]:
        """What the writer's principal needs, by resource type (named when one is refused)."""
        topics = " and ".join(repr(t) for t in self.tables)
        topic = f"WRITE on Topic {topics} (a writer needs WRITE, READ and DESCRIBE there)"
        if self.transactional_id is None:
            return {"Topic": topic, "Cluster": f"{topic}, or IDEMPOTENT_WRITE on the Cluster"}
        tid = f"WRITE and DESCRIBE on TransactionalId {self.transactional_id!r}"
        return {"Topic": topic, "TransactionalId": tid, "Cluster": tid}

    def _barrier_loop(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.barrier()
            except BaseException as exc:  # surfaced on the next write/barrier/close
                self._background_error = exc
                return
