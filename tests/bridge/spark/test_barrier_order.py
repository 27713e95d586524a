"""`writing.in_barrier_order`: the order a keyed table applies one task's changes in,
whatever order the query's plan delivered them across barriers (tested through Spark with
a join in `test_spark_changelog.py`, and with a log-tier barrier that inserts and deletes
one key in `test_spark_commit_paths.py`)."""

from __future__ import annotations

import pyarrow as pa

from bridge.spark.writing import in_barrier_order


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
