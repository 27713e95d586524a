"""Changes reads and file-tier streams over stored changelog files (changelog-producer=auto).

A changes read whose range has stored changelog is Spark's own Parquet scan of those
files (the dts extension plans it): no Python worker, pruned columns, pushed filters;
the rows equal the FileStore's `Table.changes`. Ranges without stored changelog (an
OVERWRITE) keep the Python source and its diff. Streams read the stored files per bucket.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from filestore import CommitKind, CommitProperties
from tests.bridge.spark.support import (
    commit,
    data_snapshots,
    into_dts,
    make_table,
    rows,
    sort,
    stream_from_first_snapshot,
)

pytestmark = pytest.mark.spark


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def _changes(spark: Any, warehouse: Path, start: int, end: int, **opts: str) -> Any:
    reader = spark.read.format("dts").option("warehouse", str(warehouse))
    for k, v in opts.items():
        reader = reader.option(k, v)
    return reader.option("changes", f"{start},{end}").load("db.t")


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["id"], r["_row_kind"], r["k"] or "", r["v"] if r["v"] is not None else -1.0)


def _history(warehouse: Path) -> tuple[Any, list[int]]:
    t = make_table(warehouse, "db.t", pk=True, buckets=2)
    ids = [commit(t, rows(40)).id]
    ids.append(commit(t, rows(10, start=35, k="up")).id)  # 5 updates, 5 new keys
    w = t.new_write("test")
    w.write(pa.table({"id": [3, 4], "k": ["x", "x"], "v": [0.0, 0.0], "_row_kind": ["-D"] * 2}))
    ids.append(w.commit().id)
    t.compact(full=True)
    ids.append(commit(t, rows(3, start=0, k="again")).id)
    return t, ids


def test_changes_read_is_a_native_scan_of_the_stored_changelog(spark: Any, warehouse: Path) -> None:
    t, ids = _history(warehouse)
    first, last = ids[0], ids[-1]
    df = _changes(spark, warehouse, first, last)
    plan = _plan(df)
    assert "FileScan parquet" in plan and "(Python)" not in plan
    got = sorted((r.asDict() for r in df.collect()), key=_key)
    want = t.changes(first, last).to_pylist()
    assert [{k: r[k] for k in ("id", "k", "v", "_row_kind")} for r in got] == sorted(want, key=_key)
    assert {r["_row_kind"] for r in got} == {"+I", "-U", "+U", "-D"}
    # each row carries the barrier-less snapshot's barrier (None here) as _barrier
    assert {r["_barrier"] for r in got} == {None}
    # pruning and push-down reach the changelog files
    narrow = df.where("id >= 35").select("id", "_row_kind")
    plan = _plan(narrow)
    assert "PushedFilters: [IsNotNull(id), GreaterThanOrEqual(id,35)]" in plan
    assert "ReadSchema: struct<id:bigint,_VALUE_KIND:tinyint>" in plan
    assert sorted(r.id for r in narrow.where("_row_kind = '+I'").collect()) == list(range(40, 45))


def test_change_feed_is_native_with_delta_change_types(spark: Any, warehouse: Path) -> None:
    _, ids = _history(warehouse)
    df = (
        spark.read.format("dts")
        .option("warehouse", str(warehouse))
        .option("readChangeFeed", "true")
        .option("startingVersion", str(ids[1]))
        .option("endingVersion", str(ids[1]))
        .load("db.t")
    )
    assert "(Python)" not in _plan(df)
    kinds = sorted((r.id, r._row_kind, r._change_type) for r in df.collect() if r.id == 35)
    assert kinds == [(35, "+U", "update_postimage"), (35, "-U", "update_preimage")]


def test_barriers_come_from_each_changelog_files_snapshot(spark: Any, warehouse: Path) -> None:
    t = make_table(warehouse, "db.t", pk=True, buckets=2)
    a = commit(t, rows(4), barrier=100)
    commit(t, rows(2, k="b"), barrier=200)
    c = commit(t, rows(2, start=10), barrier=300)
    df = _changes(spark, warehouse, a.id, c.id)
    assert "(Python)" not in _plan(df)
    got = sorted((r.id, r._row_kind, r._barrier) for r in df.collect())
    assert got == [
        (0, "+U", 200),
        (0, "-U", 200),
        (1, "+U", 200),
        (1, "-U", 200),
        (10, "+I", 300),
        (11, "+I", 300),
    ]


def test_a_range_with_an_overwrite_keeps_the_python_diff(spark: Any, warehouse: Path) -> None:
    t = make_table(warehouse, "db.t", pk=True, buckets=2)
    a = commit(t, rows(6))
    w = t.new_write("ow")
    w.write(rows(2, start=100))
    messages = w.prepare()
    w.close()
    b = t.new_commit("ow").commit(messages, CommitProperties(7, kind=CommitKind.OVERWRITE))
    df = _changes(spark, warehouse, a.id, b.id)
    assert "(Python)" in _plan(df)
    got = sorted((r.id, r._row_kind) for r in df.collect())
    assert got == [(i, "-D") for i in range(6)] + [(100, "+I"), (101, "+I")]


def _stream_to_memory(spark: Any, warehouse: Path, table: str, name: str) -> str:
    """The table's file-tier stream from its first snapshot into memory table `name`, run
    to its end; the last micro-batch's physical plan."""
    q = (
        stream_from_first_snapshot(spark, warehouse, table)
        .writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None
    return str(q._jsq.explainInternal(False))


def test_file_stream_micro_batches_are_native_scans(spark: Any, warehouse: Path) -> None:
    t, ids = _history(warehouse)
    plan = _stream_to_memory(spark, warehouse, "db.t", "changelog_stream")
    assert "FileScan parquet" in plan and "(Python)" not in plan, plan
    got = spark.table("changelog_stream").collect()
    want = t.changes(ids[0], ids[-1]).num_rows + 40  # snapshot 1: 40 +I
    assert len(got) == want
    ups = [(r.id, r._row_kind) for r in got if r.id == 35]
    assert ups == [(35, "+I"), (35, "-U"), (35, "+U")]  # one key's changes stay in order
    spark.sql("DROP VIEW IF EXISTS changelog_stream")


def test_a_changelog_file_spark_would_split_is_read_in_order_by_python(
    spark: Any, warehouse: Path
) -> None:
    """A file larger than spark.sql.files.maxPartitionBytes could be split between tasks,
    parting a -U from its +U: that micro-batch goes through the Python reader, in order."""
    t = make_table(warehouse, "db.big", pk=True, buckets=1)
    commit(t, rows(3000))
    commit(t, rows(3000, k="up"))
    before = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "4096")
    try:
        plan = _stream_to_memory(spark, warehouse, "db.big", "split_stream")
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", before)
    assert "FileScan parquet" not in plan, plan
    got = [(r.id, r._row_kind) for r in spark.table("split_stream").collect()]
    assert len(got) == 3000 + 2 * 3000
    updates = got[3000:]  # each -U right before its +U, every key once
    pairs = zip(updates[::2], updates[1::2], strict=True)
    assert all(a == (b[0], "-U") and b[1] == "+U" for a, b in pairs)
    assert sorted(i for i, _ in updates[::2]) == list(range(3000))
    spark.sql("DROP VIEW IF EXISTS split_stream")


def test_a_stream_behind_its_source_catches_up_in_one_key_ordered_batch(
    spark: Any, warehouse: Path, tmp_path: Path
) -> None:
    """Seven snapshots, six of them updating the same keys: a stream started behind them
    reads them in one native micro-batch (not one per trigger, which never catches up with
    a busy source), each key's changes in one task in commit order, so the upserting sink
    ends at the source's state and stamps the last barrier."""
    src = make_table(warehouse, "db.behind", pk=True, buckets=2)
    dst = make_table(warehouse, "db.behind_copy", pk=True, buckets=2)
    commit(src, rows(50), barrier=10)
    for i in range(6):
        commit(src, rows(20, start=10, k=f"u{i}"), barrier=20 + i)
    behind = stream_from_first_snapshot(spark, warehouse, "db.behind")
    q = into_dts(behind, warehouse, "db.behind_copy", tmp_path / "ck")
    plan = str(q._jsq.explainInternal(False))
    assert "FileScan parquet" in plan and "(Python)" not in plan, plan
    assert "Exchange hashpartitioning(id" in plan, plan  # each key's changes to one task
    assert sort(dst.read()) == sort(src.read())  # every key's last update won
    assert [s.barrier for s in data_snapshots(dst)] == [25]  # one batch, the last barrier


def test_a_catch_up_joined_with_a_table_still_ends_at_the_sources_state(
    spark: Any, warehouse: Path, tmp_path: Path
) -> None:
    """The same catch-up through a join with a static table: Spark drops the source's
    sort below a join, so the sink gets a key's changes in no particular order; it applies
    them by barrier (retraction first) and still ends at the source's state, deletes
    included (issue #25's orders_enriched joins its customers this way)."""
    src = make_table(warehouse, "db.joined", pk=True, buckets=2)
    dim = make_table(warehouse, "db.joined_dim", pk=True, buckets=1)
    dst = make_table(warehouse, "db.joined_copy", pk=True, buckets=2)
    commit(dim, rows(100))
    commit(src, rows(50), barrier=10)
    for i in range(6):
        commit(src, rows(20, start=10, k=f"u{i}"), barrier=20 + i)
    w = src.new_write("test")
    w.write(pa.table({"id": [12, 13], "k": ["x", "x"], "v": [0.0, 0.0], "_row_kind": ["-D"] * 2}))
    w.commit(barrier=30)
    commit(src, rows(1, start=12, k="back"), barrier=31)  # deleted, then inserted again
    ids = (
        spark.read.format("dts").option("warehouse", str(warehouse)).load("db.joined_dim")
        .select("id")
    )  # fmt: skip
    joined = stream_from_first_snapshot(spark, warehouse, "db.joined").join(F.broadcast(ids), "id")
    q = into_dts(joined, warehouse, "db.joined_copy", tmp_path / "ck")
    assert "BroadcastHashJoin" in str(q._jsq.explainInternal(False))
    assert sort(dst.read()) == sort(src.read())
    assert [s.barrier for s in data_snapshots(dst)][-1] == 31


def test_a_catch_up_into_files_skips_the_shuffle_by_key(
    spark: Any, warehouse: Path, tmp_path: Path
) -> None:
    """The same catch-up into Spark's file sink, which appends rows and needs no per-key
    order: one native batch without the shuffle (it cost 4x the read at 7.5M changes),
    every change of the seven snapshots once."""
    src = make_table(warehouse, "db.behind_files", pk=True, buckets=2)
    commit(src, rows(50), barrier=10)
    for i in range(6):
        commit(src, rows(20, start=10, k=f"u{i}"), barrier=20 + i)
    out = tmp_path / "changes"
    q = (
        stream_from_first_snapshot(spark, warehouse, "db.behind_files")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(120)
    assert q.exception() is None
    plan = str(q._jsq.explainInternal(False))
    assert "FileScan parquet" in plan and "(Python)" not in plan, plan
    assert "Exchange" not in plan, plan
    got = spark.read.parquet(str(out)).groupBy("_row_kind").count().collect()
    first = src.snapshots()[0].id
    want = src.changes(first, src.latest_snapshot().id).to_pylist()
    kinds = {k: sum(1 for r in want if r["_row_kind"] == k) for k in ("-U", "+U")}
    assert {r["_row_kind"]: r["count"] for r in got} == {"+I": 50, **kinds}


def test_a_catch_up_into_an_aggregation_skips_the_shuffle_by_key(
    spark: Any, warehouse: Path
) -> None:
    """An aggregation does not depend on the order of its input rows: a catch-up batch it
    reads skips the shuffle by primary key, and the running counts (retractions
    subtracted) still equal the source's state per group."""
    src = make_table(warehouse, "db.behind_agg", pk=True, buckets=2)
    commit(src, rows(50), barrier=10)
    for i in range(6):
        commit(src, rows(20, start=10 + i, k=f"u{i % 2}"), barrier=20 + i)
    sign = F.when(F.col("_row_kind").isin("-U", "-D"), -1).otherwise(1)
    q = (
        stream_from_first_snapshot(spark, warehouse, "db.behind_agg")
        .groupBy("k")
        .agg(F.sum(sign).alias("n"))
        .writeStream.format("memory")
        .queryName("behind_agg")
        .outputMode("complete")
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(120)
    assert q.exception() is None
    plan = str(q._jsq.explainInternal(False))
    assert "FileScan parquet" in plan and "Exchange hashpartitioning(id" not in plan, plan
    got = {r.k: r.n for r in spark.table("behind_agg").collect() if r.n}
    want: dict[str, int] = {}
    for r in src.read().to_pylist():
        want[r["k"]] = want.get(r["k"], 0) + 1
    assert got == want
    spark.sql("DROP VIEW IF EXISTS behind_agg")
