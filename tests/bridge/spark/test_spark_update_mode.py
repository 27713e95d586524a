"""Output modes into a dts table. ``update``: an aggregation's changed groups upsert their
keys' rows and the groups a micro-batch did not touch are not written again; into a table
without a primary key it is refused (the rows would pile up). ``complete``: every
micro-batch is the whole result and replaces the table, so a group that leaves the result
(a filter after the aggregation) leaves the table, with or without a primary key. Real
Spark, real files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from filestore import Catalog
from tests.bridge.spark.support import (
    commit,
    data_snapshots,
    make_table,
    rows,
    stream_from_first_snapshot,
)

pytestmark = pytest.mark.spark

TOTALS = pa.schema(
    [pa.field("k", pa.string(), nullable=False), ("n", pa.int64()), ("total", pa.float64())]
)


def _totals(warehouse: Path, *, pk: bool) -> Any:
    return Catalog(str(warehouse)).create_table(
        "db.totals", TOTALS, primary_key=["k"] if pk else None, options={"bucket": "2"}
    )


def _aggregate(spark: Any, warehouse: Path, mode: str, checkpoint: Path) -> Any:
    """Per `k` of db.src: live rows and their sum of `v` (retractions subtracted); groups
    with no live row left are filtered out of the result."""
    sign = F.when(F.col("_row_kind").isin("-U", "-D"), -1).otherwise(1)
    return (
        stream_from_first_snapshot(spark, warehouse, "db.src")
        .groupBy("k")
        .agg(F.sum(sign).alias("n"), F.sum(sign * F.col("v")).alias("total"))
        .where(F.col("n") > 0)
        .writeStream.format("dts")
        .option("warehouse", str(warehouse))
        .option("checkpointLocation", str(checkpoint))
        .outputMode(mode)
        .trigger(availableNow=True)
        .start("db.totals")
    )


def _want(src: Any) -> dict[str, tuple[int, float]]:
    out: dict[str, tuple[int, float]] = {}
    for r in src.read().to_pylist():
        n, total = out.get(r["k"], (0, 0.0))
        out[r["k"]] = (n + 1, total + r["v"])
    return out


def _run_and_check(
    spark: Any, warehouse: Path, src: Any, totals: Any, mode: str = "update"
) -> None:
    q = _aggregate(spark, warehouse, mode, warehouse / "ck")
    assert q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    got = {r["k"]: (r["n"], r["total"]) for r in totals.read().to_pylist()}
    assert got == _want(src)  # halves: the sums are exact


def test_update_mode_upserts_only_the_groups_a_batch_changed(spark: Any, warehouse: Path) -> None:
    src = make_table(warehouse, "db.src", pk=True, buckets=2)
    totals = _totals(warehouse, pk=True)
    commit(src, rows(60), barrier=10)  # groups a, a0, a1, a2
    _run_and_check(spark, warehouse, src, totals)
    # odd ids are all in group `a`: this commit changes that group only
    changed = pa.table({"id": [1, 3, 5], "k": ["a"] * 3, "v": [100.0] * 3}, src.arrow_schema)
    commit(src, changed, barrier=20)
    _run_and_check(spark, warehouse, src, totals)  # the same query, from its checkpoint
    first, second = data_snapshots(totals)[-2:]
    assert first.delta_record_count == 4
    assert second.delta_record_count == 1  # complete mode would write all 4 groups again
    assert second.barrier == 20


@pytest.mark.parametrize("pk", [True, False])
def test_complete_mode_replaces_the_table_so_a_group_that_leaves_the_result_leaves_it(
    spark: Any, warehouse: Path, pk: bool
) -> None:
    src = make_table(warehouse, "db.src", pk=True, buckets=2)
    totals = _totals(warehouse, pk=pk)
    commit(src, rows(60), barrier=10)  # groups a, a0, a1, a2
    _run_and_check(spark, warehouse, src, totals, "complete")
    gone = [i for i in range(60) if i % 2 == 0 and i % 3 == 0]  # every row of group a0
    deletes = rows(60).take(gone).append_column("_row_kind", pa.array(["-D"] * len(gone)))
    commit(src, deletes, barrier=20)
    # the same query, from its checkpoint: a0 has no live row, the filter drops it
    _run_and_check(spark, warehouse, src, totals, "complete")
    assert sorted(r["k"] for r in totals.read().to_pylist()) == ["a", "a1", "a2"]
    last = data_snapshots(totals)[-1]
    assert (last.commit_kind, last.barrier) == ("OVERWRITE", 20)


def test_update_mode_into_a_table_without_a_primary_key_is_refused(
    spark: Any, warehouse: Path
) -> None:
    src = make_table(warehouse, "db.src", pk=True, buckets=1)
    commit(src, rows(10), barrier=10)
    totals = _totals(warehouse, pk=False)
    q = _aggregate(spark, warehouse, "update", warehouse / "ck-update")
    with pytest.raises(
        Exception, match=r"outputMode\('update'\) into db.totals needs a primary-key"
    ):
        q.awaitTermination(180)
    assert totals.latest_snapshot() is None
