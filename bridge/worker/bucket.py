"""One bucket of one table on this worker: its FileStore writer and position.

Each owned bucket gets its own ``TableWrite``, so ``prepare()`` flushes only
that bucket when it passes a marker; buckets of a table then move through
barriers independently and the committer aligns them.

Rows of the open barrier go to the FileStore writer as they arrive (it buffers
and spills to files by its own size limit); at the barrier's marker the writer
prepares them and the bucket publishes its prepared record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import pyarrow as pa

from bridge.worker.prepared import PreparedRecord, PreparedStore
from bridge.worker.state.status import BucketStatus
from logstore.spec import OFFSET_COLUMN


class BucketNormalizer(Protocol):
    """Upsert log -> full changelog for one bucket (``logstore.normalize.Normalizer``)."""

    # rows of the last batch that could not be normalized (a value a Debezium source did
    # not send, with no current value to keep), as given; None: none
    unresolved: pa.Table | None

    def process(self, table: pa.Table) -> pa.Table: ...

    def clear(self) -> None: ...

    def close(self) -> None: ...


class TableWriteLike(Protocol):
    """The part of ``filestore``'s ``TableWrite`` a bucket writer needs."""

    def write(self, data: pa.Table) -> Any: ...

    def prepare(self) -> Sequence[Any]: ...

    def discard(self) -> None: ...

    def close(self) -> None: ...


class BucketWriter:
    """Buffers a bucket's rows and prepares them at each barrier."""

    def __init__(
        self,
        bucket: int,
        writer: TableWriteLike,
        store: PreparedStore,
        status: BucketStatus,
        next_offset: int,
        generation: int,
        worker_id: str,
        encode_message: Callable[[Any], dict[str, Any]],
        transactional: bool = True,
        normalizer: BucketNormalizer | None = None,
    ) -> None:
        self.bucket = bucket
        self._writer = writer
        self._store = store
        self.status = status
        self.next_offset = next_offset
        self.generation = generation
        self._worker_id = worker_id
        self._encode = encode_message
        self._transactional = transactional
        self._normalizer = normalizer
        self._rows = 0
        self._truncated = False  # the open barrier empties the table before its rows
        self._stall_seen = 0.0
        self.closed = False
        status.owned = True
        status.next_offset = next_offset
        status.memtable_bytes = 0
        status.memtable_rows = 0

    def normalize(self, rows: pa.Table) -> pa.Table:
        """Upsert log rows -> full changelog (-U before +U, full -D) when the table needs it.

        Called with exactly the rows written, in log order, so the state always matches
        what the bucket's writer holds; a reassignment reseeds it from the snapshot.
        """
        if self._normalizer is None or rows.num_rows == 0:
            return rows
        return self._normalizer.process(rows)

    def take_unresolved(self) -> list[int]:
        """Log offsets of the rows the last ``normalize`` set apart (dead letters)."""
        unresolved = None if self._normalizer is None else self._normalizer.unresolved
        if unresolved is None:
            return []
        self._normalizer.unresolved = None  # type: ignore[union-attr]
        return [int(o) for o in unresolved.column(OFFSET_COLUMN).to_pylist()]

    def write(self, rows: pa.Table) -> None:
        """Rows of the open barrier, written now (prepared at its marker)."""
        if not rows.num_rows:
            return
        self._writer.write(rows)
        self._rows += rows.num_rows
        self.status.memtable_rows = self._rows
        self.status.memtable_bytes += rows.nbytes

    def truncate(self) -> None:
        """A truncate record passed: the open barrier's rows so far are dropped, and its
        commit empties the table before adding the rows that follow."""
        self._writer.discard()
        if self._normalizer is not None:
            self._normalizer.clear()
        self._rows = 0
        self._truncated = True
        self.status.memtable_rows = 0
        self.status.memtable_bytes = 0

    def take_stall_seconds(self) -> float:
        """Seconds the FileStore writer stalled (stop trigger) since the last call.

        The writer blocks while it stalls, so this bucket's agent stops taking
        records and Faust stops fetching once its bounded buffers are full:
        backpressure without growing memory.
        """
        total = float(getattr(self._writer, "stall_seconds", 0.0) or 0.0)
        delta, self._stall_seen = total - self._stall_seen, total
        return max(delta, 0.0)

    def advance(self, next_offset: int, last_ts_ms: int | None) -> None:
        """Records before ``next_offset`` are consumed (written, skipped or DLQ'd)."""
        if next_offset > self.next_offset:
            self.next_offset = next_offset
            self.status.after_txn_marker = False
        self.status.next_offset = self.next_offset
        if last_ts_ms is not None:
            self.status.last_record_ts_ms = last_ts_ms

    def close_barrier(self, barrier: int, next_offset: int) -> PreparedRecord:
        """Marker ``barrier`` passed: prepare the buffered rows and publish the record."""
        messages = list(self._writer.prepare())
        record = PreparedRecord(
            barrier=barrier,
            bucket=self.bucket,
            next_offset=next_offset,
            messages=[self._encode(m) for m in messages],
            record_count=self._rows,
            writer=self._worker_id,
            written_ms=int(time.time() * 1000),
            truncated=self._truncated,
        )
        self._store.put(record)
        self._rows = 0
        self._truncated = False
        self.status.memtable_rows = 0
        self.status.memtable_bytes = 0
        self.status.last_barrier_seen = barrier
        self.status.last_barrier_prepared = barrier
        self.advance(next_offset, None)
        self.status.after_txn_marker = self._transactional
        return record

    def close(self) -> None:
        """Revoked or stopping: drop what is buffered (it is redone from the snapshot)."""
        if self.closed:
            return
        self.closed = True
        self.status.owned = False
        self.status.memtable_bytes = 0
        self.status.memtable_rows = 0
        if self._normalizer is not None:
            self._normalizer.close()
        self._writer.close()
