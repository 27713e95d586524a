"""`writing.in_barrier_order`: the order a keyed table applies one task's changes in,
whatever order the query's plan delivered them across barriers (tested through Spark with
a join in `test_spark_changelog.py`, and with a log-tier barrier that inserts and deletes
one key in `test_spark_commit_paths.py`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from bridge.spark.write._tasks import in_barrier_order
from filestore import CommitProperties


def _batch(ids: list[int], kinds: list[str], barriers: list[int | None]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"id": ids, "_row_kind": kinds, "_barrier": pa.array(barriers, pa.int64())}
    )


def _applied(batches: list[pa.RecordBatch]) -> list[tuple[int, str, int]]:
    ordered = pa.Table.from_batches(in_barrier_order(batches))
    return list(zip(ordered["id"].to_pylist(), ordered["_row_kind"].to_pylist(),
                    ordered["_barrier"].to_pylist(), strict=True))  # fmt: skip


def test_changes_are_ordered_by_barrier_and_stable_within_one() -> None:
    shuffled = [
        _batch([1, 2, 1], ["-U", "+I", "+U"], [20, 10, 20]),
        _batch([1, 3, 4], ["+I", "-D", "+I"], [10, 30, 30]),
    ]
    assert _applied(shuffled) == [
        (2, "+I", 10), (1, "+I", 10),  # an earlier barrier first, whatever came first
        (1, "-U", 20), (1, "+U", 20),
        (3, "-D", 30), (4, "+I", 30),
    ]  # fmt: skip


def test_one_barrier_that_inserts_then_deletes_a_key_keeps_the_delete_last() -> None:
    """A log-tier barrier holds every change of a key in sequence: moving the retraction
    before the insert (as a rule "retractions first" would) brought deleted rows back."""
    log_order = [_batch([7, 7, 7, 7], ["+I", "-U", "+U", "-D"], [5, 5, 5, 5])]
    assert [kind for _, kind, _ in _applied(log_order)] == ["+I", "-U", "+U", "-D"]


def test_rows_without_a_barrier_keep_the_order_they_came_in() -> None:
    batches = [_batch([1, 1], ["+U", "-U"], [None, 5])]
    assert in_barrier_order(batches) == batches
    assert in_barrier_order([]) == []


def _task_rows(ids: list[int], v: float, barrier: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"id": ids, "k": ["x"] * len(ids), "v": [v] * len(ids),
         "_row_kind": ["+I"] * len(ids), "_barrier": pa.array([barrier] * len(ids), pa.int64())},
    )  # fmt: skip


def test_a_later_barrier_wins_whichever_task_wrote_last(tmp_path: Path) -> None:
    """One write, two tasks: a key's barrier-20 row reached the task that wrote first, its
    barrier-10 row the one that wrote last (a shuffle not by key, a catch-up over two
    snapshots). The writers' clocks would let the last one win; the numbers ordered by
    barrier across the tasks make barrier 20 win, as the source holds it."""
    from bridge.spark.write._tasks import commit_messages, write_task
    from tests.bridge.spark.support import commit, make_table, rows

    t = make_table(tmp_path, "db.o", buckets=1)
    commit(t, rows(3), barrier=5)
    first = write_task(t, "sink", iter([_task_rows([0, 1], 20.0, 20)]))
    last = write_task(t, "sink", iter([_task_rows([0], 10.0, 10), _task_rows([2], 10.0, 10)]))
    t.new_commit("sink").commit(commit_messages([first, last]), CommitProperties(1, barrier=20))
    got = {r["id"]: r["v"] for r in t.read().to_pylist()}
    assert got == {0: 20.0, 1: 20.0, 2: 10.0}


def test_sequence_numbers_rise_with_the_barrier_and_the_position_in_it() -> None:
    from types import SimpleNamespace

    from bridge.spark.write._tasks import BARRIER_SHIFT, barrier_sequence_numbers

    latest = SimpleNamespace(max_sequence_number=99, barrier=1000)
    ordered = [_batch([1, 2, 3], ["+I"] * 3, [1000, 1000, 1002])]
    assert barrier_sequence_numbers(ordered, latest).tolist() == [  # type: ignore[union-attr]
        100,
        101,
        100 + (2 << BARRIER_SHIFT),
    ]
    assert barrier_sequence_numbers([_batch([1], ["+I"], [None])], latest) is None
    no_barrier = SimpleNamespace(max_sequence_number=99, barrier=None)  # e.g. a batch write
    assert barrier_sequence_numbers(ordered, no_barrier) is None
    # one barrier holding more rows than its range (2^20) runs into the next one's numbers:
    # they still rise
    n = (1 << BARRIER_SHIFT) + 1
    barriers = np.concatenate([np.full(n, 1000), [1001]]).astype(np.int64)
    huge = pa.RecordBatch.from_arrays(
        [pa.array(np.arange(n + 1)), pa.array(barriers)], names=["id", "_barrier"]
    )
    crowded = barrier_sequence_numbers([huge], SimpleNamespace(max_sequence_number=-1, barrier=0))
    assert crowded is not None and bool((np.diff(crowded) > 0).all())
    assert crowded[-1] == crowded[-2] + 1  # barrier 1001 right after the crowded one
