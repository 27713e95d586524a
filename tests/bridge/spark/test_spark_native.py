"""`dts.table`: splits that need no merge are read by Spark's own Parquet reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import bridge as dts
from tests.bridge.spark.support import commit, make_table, rows, sort

pytestmark = pytest.mark.spark


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def test_append_only_table_is_read_natively_with_pruning_and_pushdown(
    spark: Any, warehouse: Path
) -> None:
    t = make_table(warehouse, "db.a", pk=False, buckets=2)
    commit(t, rows(30))
    commit(t, rows(10, start=30))
    df = dts.table(spark, "db.a", warehouse=str(warehouse))
    assert sort(df.toArrow()) == sort(t.read())
    q = df.where("id >= 35").select("id")
    plan = _plan(q)
    assert "FileScan parquet" in plan and "(Python)" not in plan
    assert "PushedFilters: [IsNotNull(id), GreaterThanOrEqual(id,35)]" in plan
    assert "ReadSchema: struct<id:bigint>" in plan  # column pruning
    assert sorted(r.id for r in q.collect()) == list(range(35, 40))


def test_primary_key_table_merges_only_where_needed(spark: Any, warehouse: Path) -> None:
    t = make_table(warehouse, "db.p", pk=True, buckets=2)
    commit(t, rows(40))
    first = dts.table(spark, "db.p", warehouse=str(warehouse))
    assert "(Python)" not in _plan(first)  # one file per bucket: no merge anywhere
    assert sort(first.toArrow()) == sort(t.read())
    # overlapping upserts and a delete: those buckets go through the merge-on-read source
    commit(t, rows(5, start=10, k="up"))
    w = t.new_write("test")
    w.write(pa.table({"id": [3], "k": ["x"], "v": [0.0], "_row_kind": ["-D"]}))
    w.commit()
    merged = dts.table(spark, "db.p", warehouse=str(warehouse))
    assert "(Python)" in _plan(merged)
    want = sort(t.read())
    assert sort(merged.toArrow()) == want and 3 not in {r["id"] for r in want}
    assert sorted(r.id for r in merged.where("k LIKE 'up%'").collect()) == list(range(10, 15))
    # fully compacted: native again, same rows
    t.compact(full=True)
    compacted = dts.table(spark, "db.p", warehouse=str(warehouse))
    assert "(Python)" not in _plan(compacted)
    assert sort(compacted.toArrow()) == want
    # time travel pins the snapshot
    s1 = t.snapshots()[0].id
    assert dts.table(spark, "db.p", warehouse=str(warehouse), snapshot_id=s1).count() == 40


def test_empty_table_gives_an_empty_frame(spark: Any, warehouse: Path) -> None:
    make_table(warehouse, "db.e")
    df = dts.table(spark, "db.e", warehouse=str(warehouse))
    assert df.count() == 0 and df.columns == ["id", "k", "v"]


def test_many_small_merge_splits_are_packed_into_few_tasks(spark: Any, warehouse: Path) -> None:
    """Every bucket needs a merge: the merge part packs small splits into tasks (as Spark
    packs small files) instead of one task and Python round trip per bucket."""
    t = make_table(warehouse, "db.many", pk=True, buckets=8)
    commit(t, rows(80))
    commit(t, rows(80, k="up"))  # every key upserted: every bucket has two runs
    splits = t.new_scan().plan()
    assert len(splits) == 8
    df = dts.table(spark, "db.many", warehouse=str(warehouse))
    assert "(Python)" in _plan(df)
    assert df.rdd.getNumPartitions() < len(splits)
    assert sort(df.toArrow()) == sort(t.read()) == sort(rows(80, k="up"))
    # many paths of a no-merge table: read without a listing job, same rows
    t.compact(full=True)
    before = spark.conf.get("spark.sql.sources.parallelPartitionDiscovery.threshold", None)
    native = dts.table(spark, "db.many", warehouse=str(warehouse))
    assert "(Python)" not in _plan(native)
    assert sort(native.toArrow()) == sort(rows(80, k="up"))
    assert spark.conf.get("spark.sql.sources.parallelPartitionDiscovery.threshold", None) == before


def test_python_source_reads_only_the_columns_a_query_needs(spark: Any, warehouse: Path) -> None:
    """The dts extension re-plans a Python source read with the columns Spark's pruning
    left (PySpark's Python data source API cannot prune by itself)."""
    t = make_table(warehouse, "db.prune", pk=True, buckets=2)
    commit(t, rows(30))
    commit(t, rows(10, start=25, k="u"))  # overlapping: every bucket merges
    src = spark.read.format("dts").option("warehouse", str(warehouse)).load("db.prune")
    summed = src.where("id < 28").selectExpr("count(*) AS n", "sum(v) AS s")
    plan = _plan(summed)
    assert "BatchScan dts[id#" in plan and ", k#" not in plan and "(Python)" in plan
    want = t.read().filter(pc.less(t.read()["id"], 28))
    got = summed.first()
    assert (got.n, got.s) == (want.num_rows, pc.sum(want["v"]).as_py())
    # count(*) needs no column: one key column is read
    counted = src.selectExpr("count(*)")
    assert "BatchScan dts[id#" in _plan(counted) and counted.first()[0] == 35
    # the merge part of dts.table is pruned too, and changelog reads keep their row kinds
    merged = dts.table(spark, "db.prune", warehouse=str(warehouse)).select("k")
    assert "BatchScan dts[k#" in _plan(merged)
    assert sorted(r.k for r in merged.collect()) == sorted(t.read()["k"].to_pylist())
    changes = (
        spark.read.format("dts")
        .option("warehouse", str(warehouse))
        .option("changes", "1,2")
        .load("db.prune")
        .select("id", "_row_kind")
    )
    kinds = {(r.id, r._row_kind) for r in changes.collect()}
    assert (25, "-U") in kinds and (25, "+U") in kinds and (34, "+I") in kinds


def test_pruned_python_source_reads_still_get_their_filters(spark: Any, warehouse: Path) -> None:
    """Re-planned with fewer columns, the read keeps Spark's filter push-down: a filter on
    the partition column leaves the other partitions' splits unplanned."""
    from filestore import Catalog
    from tests.bridge.spark.support import SCHEMA

    cat = Catalog(str(warehouse))
    cat.create_database("pp")
    t = cat.create_table(
        "pp.t", SCHEMA, primary_key=["id", "k"], partition_by=["k"], options={"bucket": "2"}
    )
    commit(t, rows(40))
    src = spark.read.format("dts").option("warehouse", str(warehouse)).load("pp.t")
    assert src.rdd.getNumPartitions() == len(t.new_scan().plan()) > 2
    narrowed = src.where("k = 'a1'").select("v")
    assert "BatchScan dts[k#" in _plan(narrowed) and "id#" not in _plan(narrowed)
    assert narrowed.rdd.getNumPartitions() <= 2  # one partition's buckets
    want = [r["v"] for r in t.read().to_pylist() if r["k"] == "a1"]
    assert sorted(r.v for r in narrowed.collect()) == sorted(want)


def test_updated_table_with_deletion_vectors_is_read_natively(
    conf_spark: Any, warehouse: Path
) -> None:
    """Deletion vectors: every file is Spark's own scan, the deleted rows filtered on
    `_metadata.row_index` in the JVM; by `dts.table`, by name, and written by Spark."""
    spark = conf_spark
    t = make_table(warehouse, "dvs.p", pk=True, buckets=2, **{"deletion-vectors.enabled": "true"})
    commit(t, rows(400))
    commit(t, rows(50, start=100, k="up"))  # overlapping upserts: vectors on the first files
    w = t.new_write("test")
    w.write(pa.table({"id": [3, 120], "k": ["x", "x"], "v": [0.0, 0.0], "_row_kind": ["-D", "-D"]}))
    w.commit()
    w.close()
    live = t.live_entries(t.latest_snapshot())
    assert any(e.file.deletion_vector for e in live)
    want = sort(t.read())
    assert len(want) == 398 and {3, 120}.isdisjoint(r["id"] for r in want)
    df = dts.table(spark, "dvs.p", warehouse=str(warehouse))
    plan = _plan(df.where("v > 10").select("id", "k"))
    assert "FileScan parquet" in plan and "(Python)" not in plan
    assert (
        "GreaterThan(v,10.0)" in plan and "ReadSchema: struct<id:bigint,k:string,v:double" in plan
    )
    assert sort(df.toArrow()) == want
    assert sorted(r.id for r in df.where("k LIKE 'up%'").collect()) == [
        i for i in range(100, 150) if i != 120
    ]
    # by name, through the extension's rule, and written by Spark (vectors grow)
    dts.register(spark, warehouse=str(warehouse))
    spark.sql("INSERT INTO dvs.p VALUES (1, 'sql', 1.0), (399, 'sql', 2.0), (1000, 'new', 3.0)")
    by_name = spark.table("dvs.p")
    assert "(Python)" not in _plan(by_name)
    got = {r.id: r.k for r in by_name.collect()}
    assert len(got) == 399 and (got[1], got[399], got[1000]) == ("sql", "sql", "new")
    assert got == {r["id"]: r["k"] for r in t.read().to_pylist()}


@pytest.mark.parametrize("seed", [5, 6])
def test_random_histories_read_through_vectors_as_the_merge_does(
    spark: Any, warehouse: Path, seed: int
) -> None:
    """Spark's native read of a table with deletion vectors equals the Python merge read
    of the same history on a table without them, at every snapshot."""
    import random

    from tests.filestore.test_deletion_vectors import _apply, _both

    with_dv, merged = _both(warehouse, f"s{seed}", {"bucket": "2"})
    pick = random.Random(seed)
    plan = [pick.choice(["upsert", "upsert", "delete", "compact", "overwrite"]) for _ in range(8)]
    # the table with vectors also compacts what its vectors mostly delete, so its snapshots
    # are paired with the merged table's by step: each holds the state its step ended in
    pairs: dict[int, int] = {}
    rnd_dv, rnd_merged = random.Random(seed * 7), random.Random(seed * 7)
    for step, op in enumerate(plan):
        before = {s.id for s in with_dv.snapshots()}
        _apply(with_dv, op, step, rnd_dv)
        _apply(merged, op, step, rnd_merged)
        state = merged.latest_snapshot()
        for snap in with_dv.snapshots():
            if snap.id not in before and state is not None:
                pairs[snap.id] = state.id
    assert pairs
    for a, b in pairs.items():
        df = dts.table(spark, with_dv.name, warehouse=str(warehouse), snapshot_id=a)
        assert "(Python)" not in _plan(df)
        assert sort(df.toArrow()) == sort(merged.read(snapshot_id=b)), (seed, plan, a)


def test_live_row_filter_follows_skipped_row_groups_and_every_file(
    spark: Any, tmp_path: Path
) -> None:
    """The JVM filter remembers each file's next deleted position: rows read after skipped
    row groups, runs of deleted rows, a file without a vector and two files read by one
    task must all come out exactly."""
    import pyarrow.parquet as pq
    from pyroaring import BitMap
    from pyspark.sql import DataFrame

    deleted = {"a.parquet": [0, 3, 4, 5, 150, 151, 640, 641], "b.parquet": [7, 500, 700, 701]}
    for name, start in (("a.parquet", 0), ("b.parquet", 1000), ("c.parquet", 2000)):
        ids = pa.array(range(start, start + 1000), pa.int64())
        pq.write_table(pa.table({"id": ids}), tmp_path / name, row_group_size=100)
    vectors = spark._jvm.java.util.HashMap()
    for name, positions in deleted.items():
        vectors.put(name, bytearray(BitMap(positions).serialize()))
    files = spark.read.parquet(
        *(str(tmp_path / n) for n in ("a.parquet", "b.parquet", "c.parquet"))
    )
    # one task reads the three files in turn
    live = DataFrame(spark._jvm.io.dts.spark.DeletionVectors.live(files._jdf, vectors), spark)
    gone = set(deleted["a.parquet"]) | {1000 + p for p in deleted["b.parquet"]}
    for where in ("true", "id >= 140 AND id < 660 OR id >= 1700", "id % 7 = 0"):
        got = sorted(r.id for r in live.coalesce(1).where(where).collect())
        expected = sorted(
            r.id for r in spark.range(3000).where(where).collect() if r.id not in gone
        )
        assert got == expected, where


def test_changelog_scans_of_other_barriers_run_the_code_compiled_for_the_first(
    spark: Any, warehouse: Path
) -> None:
    """A stream's micro-batches differ in their barrier: Spark must not compile each anew."""
    from bridge.spark.native.scan import changes

    t = make_table(warehouse, "db.cg", pk=True, buckets=2)
    commit(t, rows(20), barrier=100)
    commit(t, rows(20, start=20), barrier=200)
    first_id, second_id = [s.id for s in t.snapshots()]
    compilations = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
    first = changes(spark, str(warehouse), t, 0, first_id, False)
    assert sorted((r["id"], r["_barrier"]) for r in first.collect()) == [
        (i, 100) for i in range(20)
    ]
    compiled = compilations.METRIC_COMPILATION_TIME().getCount()
    second = changes(spark, str(warehouse), t, first_id, second_id, False)
    assert sorted((r["id"], r["_barrier"]) for r in second.collect()) == [
        (i, 200) for i in range(20, 40)
    ]
    assert compilations.METRIC_COMPILATION_TIME().getCount() == compiled
