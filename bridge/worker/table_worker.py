"""Everything one worker does for one table: its owned buckets and, when it owns
bucket 0, the table's committer.

Synchronous and Faust-free, so it can be driven directly in tests; the data
plane (``bridge.worker.dataplane``) hands it whole fetched batches and the
app's rebalance hooks call :meth:`assign` / :meth:`revoke`. ``generation`` is the
fetch epoch the buckets were opened for: records fetched for an older position
are never admitted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa

from bridge.worker import faults
from bridge.worker.alignment import split_at_markers
from bridge.worker.bucket import BucketNormalizer, BucketWriter, TableWriteLike
from bridge.worker.committer import DEFAULT_COMMIT_USER, TableCommitLike, TableCommitter
from bridge.worker.metrics import WorkerMetrics
from bridge.worker.prepared import PreparedRecord, PreparedStore
from bridge.worker.state.status import TableStatus
from filestore.format.row_kind import ROW_KIND_COLUMN as ROW_KIND
from filestore.io.file_cache import FileCache
from logstore.codec import Decoded, DecodeFailure
from logstore.markers import Marker
from logstore.records import LogRecords
from logstore.spec import OFFSET_COLUMN
from logstore.unavailable import UNFILLABLE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResumePoint:
    """Where owned buckets resume: the offsets of snapshot ``snapshot_id`` (None: no snapshot)."""

    offsets: dict[int, int]
    snapshot_id: int | None = None


@dataclass
class TableHooks:
    """How a table worker reaches the tiers (real ones from ``bridge.worker.app``,
    fakes in unit tests)."""

    new_write: Callable[[], TableWriteLike]
    new_commit: Callable[[], TableCommitLike]
    resume: Callable[[], ResumePoint]  # the latest snapshot with log offsets
    decode: Callable[[LogRecords], Decoded]
    encode_message: Callable[[Any], dict[str, Any]]
    decode_message: Callable[[dict[str, Any]], Any]
    send_to_dlq: Callable[[Sequence[DecodeFailure]], None] | None = None
    # (bucket, snapshot id to seed its state from) -> normalizer; None: rows go in as stored
    new_normalizer: Callable[[int, int | None], BucketNormalizer] | None = None
    snapshot_id_at: Callable[[int], int | None] | None = None  # barrier -> its snapshot id
    # the files the table's commits decoded for their lookups (reported as metrics)
    lookup_cache: Callable[[], FileCache] | None = None


# (table, barrier, snapshot id): a barrier was committed (the MetaService report)
BarrierListener = Callable[[str, int, int | None], None]


class TableWorker:
    def __init__(
        self,
        name: str,
        topic: str,
        num_buckets: int,
        store: PreparedStore,
        hooks: TableHooks,
        metrics: WorkerMetrics,
        status: TableStatus,
        worker_id: str,
        commit_user: str = DEFAULT_COMMIT_USER,
        transactional: bool = True,
        on_barrier: BarrierListener | None = None,
    ) -> None:
        self.name = name
        self.topic = topic
        self.num_buckets = num_buckets
        self.store = store
        self.hooks = hooks
        self.metrics = metrics
        self.status = status
        self.worker_id = worker_id
        self.commit_user = commit_user
        self.transactional = transactional
        self.on_barrier = on_barrier
        self.buckets: dict[int, BucketWriter] = {}
        self.committer: TableCommitter | None = None
        self._cache_reads = (0, 0)  # the lookup cache's hits and misses already counted

    # -- ownership -----------------------------------------------------------------

    def assign(self, buckets: Sequence[int], generation: int) -> dict[int, int]:
        """Take these buckets; returns where each resumes (latest snapshot's offsets).

        State of buckets held before is dropped: whatever they buffered or
        prepared past the snapshot is redone, which yields the same records.
        Their uncommitted prepared records are deleted first: sequence numbers
        are taken at write time, so a barrier redone now must not be followed by
        a later barrier prepared before the crash (its rows would sort older).
        """
        self.revoke(list(self.buckets))
        if buckets:
            self.store.discard_buckets(buckets)
        faults.reach("assigning")
        point = self.hooks.resume()
        resume: dict[int, int] = {}
        for b in buckets:
            start = int(point.offsets.get(b, 0))
            normalizer = None
            if self.hooks.new_normalizer is not None:
                # seeded from the same snapshot the offsets come from
                normalizer = self.hooks.new_normalizer(b, point.snapshot_id)
            self.buckets[b] = BucketWriter(
                b,
                self.hooks.new_write(),
                self.store,
                self.status.bucket(b),
                start,
                generation,
                self.worker_id,
                self.hooks.encode_message,
                self.transactional,
                normalizer,
            )
            resume[b] = start
        if 0 in buckets:
            self.committer = TableCommitter(
                self.name,
                self.num_buckets,
                self.store,
                self.hooks.new_commit(),
                self.hooks.decode_message,
                on_commit=self._committed,
                snapshot_id_at=self.hooks.snapshot_id_at,
            )
            last = self.committer.last_committed
            self._set_committed(last)
            if last is not None and self.on_barrier is not None:
                # a crash between a commit and its report loses nothing: report it again
                snap = self.hooks.snapshot_id_at(last) if self.hooks.snapshot_id_at else None
                self.on_barrier(self.name, last, snap)
        self.status.committer = self.committer is not None
        return resume

    def revoke(self, buckets: Sequence[int]) -> None:
        for b in buckets:
            writer = self.buckets.pop(b, None)
            if writer is not None:
                writer.close()
            if b == 0:
                self.committer = None
        self.status.committer = self.committer is not None

    def close(self) -> None:
        self.revoke(list(self.buckets))

    # -- data path -----------------------------------------------------------------

    def admit(self, records: LogRecords, generation: int) -> LogRecords:
        """The records of owned buckets, fetched for their current assignment
        (``generation``), not yet consumed."""
        if not len(records):
            return records
        keep = np.zeros(len(records), dtype=bool)
        for b in np.unique(records.partitions).tolist():
            w = self.buckets.get(b)
            if w is None or w.closed or w.generation != generation:
                continue
            keep |= (records.partitions == b) & (records.offsets >= w.next_offset)
        return records.take(np.flatnonzero(keep))

    def process(self, records: LogRecords) -> list[PreparedRecord]:
        """Decode a batch (already filtered by :meth:`admit`), buffer its rows and
        prepare every barrier it closes. Returns the records prepared."""
        if not len(records):
            return []
        decoded = self.hooks.decode(records)
        faults.reach("batch")
        self._dead_letter(decoded.errors)
        prepared: list[PreparedRecord] = []
        set_apart: list[tuple[int, int]] = []  # (bucket, offset) of rows normalize refused
        table: pa.Table = decoded.table
        markers: dict[int, list[Marker]] = {}
        for m in decoded.markers:
            markers.setdefault(int(m.partition), []).append(m)
        truncates: dict[int, list[int]] = {}
        for tr in decoded.truncates:
            truncates.setdefault(int(tr.partition), []).append(int(tr.offset))
        parts = table.column("_partition").to_numpy() if table.num_rows else np.empty(0, np.int32)
        for b, (last_offset, last_ts) in records.last_per_partition().items():
            writer = self.buckets.get(b)
            if writer is None or writer.closed:
                continue  # revoked while this batch was in flight
            rows = table.take(np.flatnonzero(parts == b)) if table.num_rows else table
            prepared += self._process_bucket(
                writer, rows, markers.get(b, []), sorted(truncates.get(b, [])), set_apart
            )
            writer.advance(last_offset + 1, last_ts)
        self._dead_letter(_unfillable(records, set_apart))
        return prepared

    def _process_bucket(
        self,
        writer: BucketWriter,
        rows: pa.Table,
        markers: list[Any],
        truncates: list[int],
        set_apart: list[tuple[int, int]],
    ) -> list[PreparedRecord]:
        offsets = rows.column("_offset").to_numpy() if rows.num_rows else np.empty(0, np.int64)
        if offsets.size > 1 and np.any(np.diff(offsets) < 0):
            order = np.argsort(offsets, kind="stable")
            rows, offsets = rows.take(order), offsets[order]
        labels = {"table": self.name, "bucket": str(writer.bucket), "job": self.metrics.job}
        self.metrics.records_in.labels(**labels).inc(rows.num_rows)
        cuts = [(int(m.offset), int(m.barrier)) for m in markers]
        prepared = []
        for seg in split_at_markers(offsets, cuts):
            end = seg.next_offset - 1 if seg.next_offset is not None else None
            cut = [t for t in truncates if end is None or t < end]
            if cut:
                truncates = truncates[len(cut) :]
                writer.truncate()  # the last one wins: rows before it are gone
                seg = replace(seg, start=max(seg.start, int(np.searchsorted(offsets, cut[-1]))))
            if seg.stop > seg.start:
                # read_committed: every record that arrives is committed, so it goes to the
                # FileStore writer at once (which spills to files): memory stays bounded
                # however long a barrier is
                given = _data_columns(rows.slice(seg.start, seg.stop - seg.start), OFFSET_COLUMN)
                data = _data_columns(writer.normalize(given))
                set_apart += [(writer.bucket, o) for o in writer.take_unresolved()]
                writer.write(data)
                self.metrics.records_out.labels(**labels).inc(data.num_rows)
            if seg.barrier is None or seg.next_offset is None:
                continue
            prepared.append(writer.close_barrier(seg.barrier, seg.next_offset))
            faults.reach("prepared")
            self.metrics.barrier_last_seen.labels(**labels).set(seg.barrier)
            stalled = writer.take_stall_seconds()
            if stalled:
                self.metrics.stall_seconds.labels(**labels).inc(stalled)
                writer.status.stall_seconds += stalled
        self.metrics.memtable_bytes.labels(**labels).set(writer.status.memtable_bytes)
        return prepared

    def _dead_letter(self, errors: Sequence[DecodeFailure]) -> None:
        if not errors:
            return
        if self.hooks.send_to_dlq is not None:
            self.hooks.send_to_dlq(errors)
        self.status.dlq_records += len(errors)
        per_bucket: dict[int, int] = {}
        for e in errors:
            p = e.partition
            per_bucket[p] = per_bucket.get(p, 0) + 1
        for b, n in per_bucket.items():
            self.metrics.dlq_records.labels(self.name, str(b), self.metrics.job).inc(n)

    # -- committing ----------------------------------------------------------------

    def commit_ready(self) -> list[int]:
        committer = self.committer
        if committer is None:
            return []
        done = committer.commit_ready()
        self.status.commit_waits_for = committer.waiting_for
        return done

    def _committed(
        self,
        barrier: int,
        seconds: float,
        records: Sequence[PreparedRecord],
        snapshot_id: int | None,
    ) -> None:
        self.metrics.commit_duration.labels(self.name, self.metrics.job).observe(seconds)
        self._report_lookup_cache()
        self._set_committed(barrier)
        self.status.last_commit_ms = max((r.written_ms for r in records), default=None)
        if self.on_barrier is not None:
            self.on_barrier(self.name, barrier, snapshot_id)

    def _report_lookup_cache(self) -> None:
        if self.hooks.lookup_cache is None:
            return
        cache = self.hooks.lookup_cache()
        job = self.metrics.job
        self.metrics.lookup_cache_bytes.labels(self.name, job).set(cache.nbytes)
        seen_hits, seen_misses = self._cache_reads
        reads = self.metrics.lookup_cache_reads
        reads.labels(self.name, job, "hit").inc(max(0, cache.hits - seen_hits))
        reads.labels(self.name, job, "miss").inc(max(0, cache.misses - seen_misses))
        self._cache_reads = (cache.hits, cache.misses)

    def _set_committed(self, barrier: int | None) -> None:
        if barrier is None:
            return
        self.status.last_barrier_committed = barrier
        self.metrics.barrier_last_committed.labels(self.name, self.metrics.job).set(barrier)


def _data_columns(rows: pa.Table, keep: str | None = None) -> pa.Table:
    """The row columns (+ ``_row_kind``) the FileStore writer takes; drops log bookkeeping
    (but ``keep``)."""
    drop = [c for c in rows.column_names if c.startswith("_") and c not in (ROW_KIND, keep)]
    return rows.drop_columns(drop) if drop else rows


def _unfillable(records: LogRecords, where: list[tuple[int, int]]) -> list[DecodeFailure]:
    """The records of rows the normalizer could not fill in, as dead letters."""
    if not where:
        return []
    out = []
    for p, o in where:  # dead letters only: a handful
        i = int(np.flatnonzero((records.partitions == p) & (records.offsets == o))[0])
        out.append(
            DecodeFailure(p, o, UNFILLABLE, records.keys[i], records.values[i], records.headers[i])
        )
    return out
