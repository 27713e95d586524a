"""BarrierGate: per partition, hold rows until their barrier marker, then release them.

It assigns ``_barrier``, keeps per-partition order and stops a partition at
``until_barrier``. Every row it is given is released: readers consume
``read_committed``, so aborted records never get here, and rows of other
producers between two markers belong to the barrier of the marker after them.
Used by LogReader and by the Faust worker on decoded batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from logstore.codec import Decoded
from logstore.markers import Marker, Truncate
from logstore.spec import BARRIER_COLUMN


@dataclass(frozen=True)
class DataBatch:
    """Rows of one partition: table columns + _row_kind, _partition, _offset, _barrier.

    Attributes:
        table: the rows.

    Example:
        >>> batches = [e.table for e in reader if isinstance(e, DataBatch)]
    """

    table: pa.Table


@dataclass(frozen=True)
class BarrierPassed:
    """Partition ``partition`` passed the marker of ``barrier`` at ``offset``.

    Attributes:
        partition: the partition (= bucket).
        barrier: the barrier's id.
        offset: the marker's offset.

    Example:
        >>> done = {e.partition for e in reader if isinstance(e, BarrierPassed)}
    """

    partition: int
    barrier: int
    offset: int


@dataclass(frozen=True)
class Truncated:
    """Partition ``partition`` was truncated at ``offset`` (inside ``barrier``; None on
    eventual tables): every row of it released before this event is removed.

    Attributes:
        partition: the partition (= bucket).
        offset: the truncate record's offset.
        barrier: the barrier it belongs to (None on eventual tables).

    Example:
        >>> emptied = [e.partition for e in reader if isinstance(e, Truncated)]
    """

    partition: int
    offset: int
    barrier: int | None


Event = DataBatch | BarrierPassed | Truncated


@dataclass
class _PartitionState:
    pending: list[pa.Table] = field(default_factory=list)
    truncates: list[int] = field(default_factory=list)  # offsets not yet released
    last_barrier: int | None = None
    next_offset: int | None = None  # offset just after the last marker passed
    done: bool = False


class BarrierGate:
    """``hold=True``: release rows only when their marker arrives (transactional tables,
    or whenever ``until_barrier`` is set); ``hold=False``: release at once with a null
    ``_barrier`` (eventual tables)."""

    def __init__(self, hold: bool = True, until_barrier: int | None = None) -> None:
        self.hold = hold or until_barrier is not None
        self.until_barrier = until_barrier
        self._parts: dict[int, _PartitionState] = {}

    def state(self, partition: int) -> _PartitionState:
        st = self._parts.get(partition)
        if st is None:
            st = self._parts[partition] = _PartitionState()
        return st

    def finished(self, partitions: list[int]) -> bool:
        return all(self.state(p).done for p in partitions)

    def positions(self) -> dict[int, int]:
        """Per partition, the offset just after the last marker passed."""
        return {p: s.next_offset for p, s in self._parts.items() if s.next_offset is not None}

    def pending_rows(self) -> int:
        return sum(t.num_rows for s in self._parts.values() for t in s.pending)

    def push(self, decoded: Decoded) -> list[Event]:
        table = decoded.table
        by_part: dict[int, list[Marker]] = {}
        for m in decoded.markers:
            by_part.setdefault(m.partition, []).append(m)
        truncates: dict[int, list[Truncate]] = {}
        for tr in decoded.truncates:
            truncates.setdefault(tr.partition, []).append(tr)
        parts = set(by_part) | set(truncates)
        if table.num_rows:
            parts.update(pc.unique(table.column("_partition")).to_pylist())
        events: list[Event] = []
        for p in sorted(parts):
            rows = table.filter(pc.equal(table.column("_partition"), p)) if table.num_rows else None
            st = self.state(p)
            if not st.done:
                st.truncates.extend(tr.offset for tr in truncates.get(p, []))
            events.extend(
                self._push_partition(p, rows, sorted(by_part.get(p, []), key=lambda m: m.offset))
            )
        return events

    def _push_partition(self, p: int, rows: pa.Table | None, markers: list[Marker]) -> list[Event]:
        st = self.state(p)
        if st.done:
            return []
        if rows is not None and rows.num_rows:
            st.pending.append(rows)
        events: list[Event] = []
        for m in markers:
            seg = self._take_before(st, m.offset)
            past_end = self.until_barrier is not None and m.barrier > self.until_barrier
            if not past_end:
                events.extend(self._release(p, st, seg, m.offset, m.barrier))
            if past_end:
                st.done = True
                st.pending.clear()
                return events
            st.last_barrier = m.barrier
            st.next_offset = m.offset + 1
            events.append(BarrierPassed(p, m.barrier, m.offset))
            if self.until_barrier is not None and m.barrier == self.until_barrier:
                st.done = True
                st.pending.clear()
                return events
        if not self.hold and (st.pending or st.truncates):
            seg = pa.concat_tables(st.pending) if st.pending else None
            st.pending.clear()
            events.extend(self._release(p, st, seg, None, None))
        return events

    @staticmethod
    def _release(
        p: int, st: _PartitionState, seg: pa.Table | None, end: int | None, barrier: int | None
    ) -> list[Event]:
        """Rows of one barrier, cut at the truncates before offset ``end`` (None: all)."""
        cuts = sorted(o for o in st.truncates if end is None or o < end)
        st.truncates = [o for o in st.truncates if o not in cuts]
        events: list[Event] = []
        rest = seg
        for o in cuts:
            if rest is not None and rest.num_rows:
                before = pc.less(rest.column("_offset"), o)
                head, rest = rest.filter(before), rest.filter(pc.invert(before))
                if head.num_rows:
                    events.append(DataBatch(_with_barrier(head, barrier)))
            events.append(Truncated(p, o, barrier))
        if rest is not None and rest.num_rows:
            events.append(DataBatch(_with_barrier(rest, barrier)))
        return events

    @staticmethod
    def _take_before(st: _PartitionState, offset: int) -> pa.Table | None:
        if not st.pending:
            return None
        allrows = pa.concat_tables(st.pending)
        before = pc.less(allrows.column("_offset"), offset)
        seg = allrows.filter(before)
        rest = allrows.filter(pc.invert(before))
        st.pending = [rest] if rest.num_rows else []
        return seg


def _with_barrier(table: pa.Table, barrier: int | None) -> pa.Table:
    if barrier is None:
        col = pa.nulls(table.num_rows, pa.int64())
    else:
        col = pa.array(np.full(table.num_rows, barrier, dtype=np.int64))
    return table.append_column(pa.field(BARRIER_COLUMN, pa.int64()), col)
