"""`writing.in_barrier_order`: the order a keyed table applies one task's changes in,
whatever order the query's plan delivered them (tested through Spark with a join in
`test_spark_changelog.py`)."""

from __future__ import annotations

import pyarrow as pa

from bridge.spark.writing import in_barrier_order


def _batch(ids: list[int], kinds: list[str], barriers: list[int | None]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"id": ids, "_row_kind": kinds, "_barrier": pa.array(barriers, pa.int64())}
    )


def test_changes_are_ordered_by_barrier_retraction_first_and_stable_otherwise() -> None:
    shuffled = [
        _batch([1, 2, 1], ["+U", "+I", "-U"], [20, 10, 20]),
        _batch([1, 3, 4], ["+I", "-D", "+I"], [10, 30, 30]),
    ]
    ordered = pa.Table.from_batches(in_barrier_order(shuffled))
    assert list(zip(ordered["id"].to_pylist(), ordered["_row_kind"].to_pylist(),
                    ordered["_barrier"].to_pylist(), strict=True)) == [
        (2, "+I", 10), (1, "+I", 10),  # one barrier and kind: as they came
        (1, "-U", 20), (1, "+U", 20),  # the retraction before the new row
        (3, "-D", 30), (4, "+I", 30),
    ]  # fmt: skip


def test_rows_without_a_barrier_keep_the_order_they_came_in() -> None:
    batches = [_batch([1, 1], ["+U", "-U"], [None, 5])]
    assert in_barrier_order(batches) == batches
    assert in_barrier_order([]) == []
