"""Batch reads and writes through the `dts` data source on real local Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.bridge.spark.support import commit, data_snapshots, make_table, rows, sort

pytestmark = pytest.mark.spark


def _read(dts: Any, warehouse: Path, name: str = "db.t", **opts: Any) -> Any:
    r = dts.read.format("dts").option("warehouse", str(warehouse))
    for k, v in opts.items():
        r = r.option(k, str(v))
    return r.load(name)


def test_batch_read_equals_filestore_and_time_travels(dts: Any, warehouse: Path) -> None:
    t = make_table(warehouse)
    s1 = commit(t, rows(20), barrier=100)
    commit(t, rows(10, start=15, k="b"), barrier=200)  # upserts ids 15..19, inserts 20..24
    df = _read(dts, warehouse)
    assert df.rdd.getNumPartitions() == len(t.new_scan().plan())  # one partition per bucket split
    assert sort(df.toArrow()) == sort(t.read())
    assert sort(_read(dts, warehouse, **{"snapshot-id": s1.id}).toArrow()) == sort(
        t.read(snapshot_id=s1.id)
    )
    at_barrier = _read(dts, warehouse, barrier=150).toArrow()
    assert sort(at_barrier) == sort(t.read(barrier=150)) and at_barrier.num_rows == 20


def test_filter_pushdown_and_projection(dts: Any, warehouse: Path) -> None:
    t = make_table(warehouse)
    commit(t, rows(50))
    got = _read(dts, warehouse).filter("id >= 40 and k = 'a'").toArrow()
    want = [r for r in t.read().to_pylist() if r["id"] >= 40 and r["k"] == "a"]
    assert sort(got) == sorted(want, key=lambda r: r["id"])
    proj = (
        dts.read.format("dts")
        .option("warehouse", str(warehouse))
        .schema("id long, v double")
        .load("db.t")
    )
    assert proj.columns == ["id", "v"]
    assert sorted(proj.toArrow().column("id").to_pylist()) == list(range(50))


def test_changes_read_has_row_kinds(dts: Any, warehouse: Path) -> None:
    t = make_table(warehouse)
    s1 = commit(t, rows(3), barrier=10)
    w = t.new_write("test")
    import pyarrow as pa

    w.write(pa.table({"id": [1, 2], "k": ["x", "x"], "v": [9.0, 9.0], "_row_kind": ["+U", "-D"]}))
    s2 = w.commit(barrier=20)
    got = _read(dts, warehouse, changes=f"{s1.id},{s2.id}").toArrow()
    kinds = sorted((r["id"], r["_row_kind"], r["_barrier"]) for r in got.to_pylist())
    assert kinds == [(1, "+U", 20), (1, "-U", 20), (2, "-D", 20)] or kinds == [
        (1, "+U", 20),
        (2, "-D", 20),
    ]


def test_batch_write_append_and_overwrite_one_snapshot_each(dts: Any, warehouse: Path) -> None:
    t = make_table(warehouse, "db.w", pk=False)
    before = len(data_snapshots(t))
    df = dts.createDataFrame(rows(30)).repartition(3)
    df.write.format("dts").option("warehouse", str(warehouse)).mode("append").save("db.w")
    assert len(data_snapshots(t)) == before + 1
    assert t.read().num_rows == 30
    df.write.format("dts").option("warehouse", str(warehouse)).mode("append").save("db.w")
    assert t.read().num_rows == 60
    small = dts.createDataFrame(rows(5, start=100))
    small.write.format("dts").option("warehouse", str(warehouse)).mode("overwrite").save("db.w")
    snaps = data_snapshots(t)
    assert len(snaps) == before + 3 and snaps[-1].commit_kind == "OVERWRITE"
    assert sort(t.read()) == sort(rows(5, start=100))


def test_failed_batch_write_leaves_nothing_visible(dts: Any, warehouse: Path) -> None:
    from pyspark.sql import functions as F

    t = make_table(warehouse, "db.f", pk=False)
    commit(t, rows(4))
    files_before = {p for p in (warehouse / "db.db" / "f").rglob("*.parquet")}

    @F.udf("double")
    def boom(v: float) -> float:
        if v > 10:
            raise ValueError("task failure on purpose")
        return v

    df = dts.createDataFrame(rows(40)).repartition(2).withColumn("v", boom("v"))
    with pytest.raises(Exception, match="task failure on purpose"):
        df.write.format("dts").option("warehouse", str(warehouse)).mode("append").save("db.f")
    assert t.read().num_rows == 4 and len(data_snapshots(t)) == 1
    files_after = {p for p in (warehouse / "db.db" / "f").rglob("*.parquet")}
    assert files_after == files_before  # aborted task files were removed


def test_spark_own_parquet_reader_reads_data_files(spark: Any, warehouse: Path) -> None:
    # data files are plain Parquet (delta-packed keys, plain doubles):
    # Spark's built-in reader must read them without the `dts` source
    t = make_table(warehouse, buckets=1)
    commit(t, rows(50))
    files = [str(p) for p in warehouse.rglob("data-*.parquet")]
    assert files
    got = spark.read.parquet(*files).select("id", "k", "v").toArrow()
    assert sort(got) == sort(t.read())
