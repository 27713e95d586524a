"""Barrier alignment: pure decisions the worker makes from what buckets reported.

Nothing here touches Kafka, files or clocks, so every rule of the barrier
protocol (DESIGN.md, "Barriers and consistency") is unit-testable:

- a bucket's batch is cut at its markers: rows before marker N belong to N;
- barrier N of a table is complete once every bucket prepared N;
- snapshots are committed in barrier order: an incomplete barrier blocks the
  ones after it, and barriers at or below the last committed one are stale.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Segment:
    """Rows ``[start, stop)`` of a bucket's batch, closed by ``barrier`` if not None.

    ``next_offset`` is the log offset right after the closing marker, i.e. where
    a bucket resumes once this barrier is committed.
    """

    start: int
    stop: int
    barrier: int | None = None
    next_offset: int | None = None


def split_at_markers(row_offsets: np.ndarray, markers: Sequence[tuple[int, int]]) -> list[Segment]:
    """Cut one bucket's rows (sorted by offset) at its markers ``(offset, barrier)``.

    Returns one segment per marker (possibly empty) and a trailing open segment
    for rows after the last marker. Vectorized: one ``searchsorted`` per batch.
    """
    ordered = sorted(markers)
    cuts = np.searchsorted(row_offsets, np.array([o for o, _ in ordered], dtype=np.int64))
    segments: list[Segment] = []
    start = 0
    for (offset, barrier), cut in zip(ordered, cuts.tolist(), strict=True):
        segments.append(Segment(start, int(cut), barrier, offset + 1))
        start = int(cut)
    segments.append(Segment(start, len(row_offsets)))
    return segments


def next_committable(
    prepared: Mapping[int, Iterable[int]], num_buckets: int, last_committed: int | None
) -> int | None:
    """The barrier to commit next, or None when the oldest pending one is incomplete.

    ``prepared`` maps barrier -> buckets that prepared it. Barriers are
    committed in order, so only the smallest barrier above ``last_committed``
    is a candidate; it qualifies once all ``num_buckets`` buckets prepared it.
    """
    pending = sorted(b for b in prepared if last_committed is None or b > last_committed)
    if not pending:
        return None
    oldest = pending[0]
    done = set(prepared[oldest])
    return oldest if done.issuperset(range(num_buckets)) else None


def stale_barriers(prepared: Iterable[int], last_committed: int | None) -> list[int]:
    """Prepared barriers already covered by a committed snapshot (safe to delete)."""
    if last_committed is None:
        return []
    return sorted(b for b in prepared if b <= last_committed)


def missing_buckets(
    prepared: Mapping[int, Iterable[int]], barrier: int, num_buckets: int
) -> list[int]:
    """Buckets that have not prepared ``barrier`` yet (for /status and logs)."""
    return sorted(set(range(num_buckets)) - set(prepared.get(barrier, ())))
