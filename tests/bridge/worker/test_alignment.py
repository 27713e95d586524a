"""Barrier alignment rules (pure logic)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from bridge.worker.alignment import (
    Segment,
    missing_buckets,
    next_committable,
    split_at_markers,
    stale_barriers,
)


def test_split_cuts_rows_before_each_marker() -> None:
    offsets = np.array([0, 1, 3, 4, 6, 7], dtype=np.int64)
    segs = split_at_markers(offsets, [(5, 200), (2, 100)])
    assert segs == [
        Segment(0, 2, 100, 3),
        Segment(2, 4, 200, 6),
        Segment(4, 6, None, None),
    ]


def test_split_without_markers_is_one_open_segment() -> None:
    assert split_at_markers(np.array([4, 5], dtype=np.int64), []) == [Segment(0, 2)]


def test_split_marker_only_batch_gives_empty_segment() -> None:
    assert split_at_markers(np.empty(0, np.int64), [(9, 1)]) == [
        Segment(0, 0, 1, 10),
        Segment(0, 0),
    ]


@given(
    st.lists(st.integers(0, 200), unique=True, max_size=60),
    st.lists(st.integers(0, 200), unique=True, max_size=6),
)
def test_split_partitions_rows_exactly(rows: list[int], marks: list[int]) -> None:
    marks = [m for m in marks if m not in rows]
    offsets = np.array(sorted(rows), dtype=np.int64)
    segs = split_at_markers(offsets, [(m, 1000 + m) for m in marks])
    covered = [int(o) for s in segs for o in offsets[s.start : s.stop]]
    assert covered == sorted(rows)
    for s in segs:
        if s.barrier is not None:
            marker = s.barrier - 1000
            assert all(o < marker for o in offsets[s.start : s.stop])
            assert s.next_offset == marker + 1


def test_committable_needs_every_bucket() -> None:
    assert next_committable({10: {0, 1}}, 3, None) is None
    assert next_committable({10: {0, 1, 2}}, 3, None) == 10


def test_committable_in_order_only() -> None:
    prepared = {10: {0}, 20: {0, 1}}
    # 20 is complete but 10 is not: nothing may be committed yet
    assert next_committable(prepared, 2, None) is None
    assert next_committable(prepared, 2, 10) == 20


def test_committed_barriers_are_stale() -> None:
    prepared = {5: {0}, 10: {0, 1}, 20: {1}}
    assert next_committable(prepared, 2, 10) is None
    assert stale_barriers(prepared, 10) == [5, 10]
    assert stale_barriers(prepared, None) == []
    assert missing_buckets(prepared, 20, 3) == [0, 2]
