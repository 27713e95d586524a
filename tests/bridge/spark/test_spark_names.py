"""Tables by name: `dts.register(spark, warehouse=W)` makes every table a Spark table `db.t`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import bridge as dts
from tests.bridge.spark.support import commit, make_table, rows, sort

pytestmark = pytest.mark.spark


def test_tables_by_name_read_in_sql_and_spark_table(conf_spark: Any, warehouse: Path) -> None:
    spark = conf_spark
    t = make_table(warehouse, "shopn.orders")
    commit(t, rows(10))
    assert "shopn.orders" in dts.register(spark, warehouse=str(warehouse))
    assert sort(spark.table("shopn.orders").toArrow()) == sort(t.read())
    got = spark.sql("SELECT count(*) AS n, sum(v) AS s FROM shopn.orders WHERE id < 4").first()
    assert (got.n, got.s) == (4, 0.0 + 0.5 + 1.0 + 1.5)
    # reads by name always see the latest snapshot
    commit(t, rows(2, start=50))
    assert spark.table("shopn.orders").count() == 12


def test_writes_by_name(conf_spark: Any, warehouse: Path) -> None:
    spark = conf_spark
    t = make_table(warehouse, "shopn.items", pk=True)
    commit(t, rows(3))
    dts.register(spark, warehouse=str(warehouse))
    spark.sql("INSERT INTO shopn.items VALUES (100, 'x', 1.0), (1, 'upd', 9.0)")
    assert {r["id"]: r["k"] for r in t.read().to_pylist()} == {0: "a0", 1: "upd", 2: "a2", 100: "x"}
    spark.createDataFrame(rows(1, start=200)).write.insertInto("shopn.items")
    assert t.read().num_rows == 5
    spark.createDataFrame(rows(1, start=300)).write.format("dts").mode("append").saveAsTable(
        "shopn.items"
    )
    assert t.read().num_rows == 6
    spark.createDataFrame(rows(1, start=400)).writeTo("shopn.items").append()
    assert t.read().num_rows == 7
    spark.sql("INSERT OVERWRITE shopn.items VALUES (7, 'only', 7.0)")
    assert t.read().to_pylist() == [{"id": 7, "k": "only", "v": 7.0}]


def test_tables_created_later_become_visible(conf_spark: Any, warehouse: Path) -> None:
    spark = conf_spark
    make_table(warehouse, "shopn.first")
    dts.register(spark, warehouse=str(warehouse))
    later = make_table(warehouse, "shopn.later")  # e.g. by a worker or another job
    commit(later, rows(5))
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.table("shopn.later")
    assert "shopn.later" in dts.refresh(spark)
    assert spark.sql("SELECT count(*) FROM shopn.later").first()[0] == 5
    # CTAS through dts.create_table_as exposes its table at once
    df = spark.createDataFrame(rows(3, start=40))
    dts.create_table_as(spark, "shopn.ctas", df, primary_key=["id"])
    assert spark.table("shopn.ctas").count() == 3
    # a table dropped from the warehouse leaves the Spark catalog on refresh
    from filestore import Catalog

    Catalog(str(warehouse)).drop_table("shopn.later")
    dts.refresh(spark)
    assert not spark.catalog.tableExists("later", "shopn")


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def test_reads_by_name_use_sparks_parquet_reader_where_no_merge_is_needed(
    conf_spark: Any, warehouse: Path
) -> None:
    from bridge.spark.native.extension import native_by_name

    spark = conf_spark
    t = make_table(warehouse, "shopx.orders", pk=True, buckets=2)
    commit(t, rows(40))
    t.compact(full=True)
    dts.register(spark, warehouse=str(warehouse))
    assert native_by_name(spark)
    summed = spark.sql("SELECT sum(v) AS s FROM shopx.orders WHERE id < 10")
    plan = _plan(summed)
    assert "FileScan parquet" in plan and "(Python)" not in plan
    assert "ReadSchema: struct<id:bigint,v:double>" in plan  # k is pruned
    assert "PushedFilters: [IsNotNull(id), LessThan(id,10)]" in plan
    assert summed.first().s == sum(i * 0.5 for i in range(10))
    # an overlapping upsert: its buckets merge in the Python source, the rest stay native
    commit(t, rows(3, start=38, k="u"))
    df = spark.table("shopx.orders")
    assert "BatchScan dts" in _plan(df)
    assert sort(df.toArrow()) == sort(t.read())
    # each query plans the latest snapshot, and writes by name land
    spark.sql("INSERT INTO shopx.orders VALUES (500, 'new', 5.0)")
    got = spark.sql("SELECT count(*) AS n, max(id) AS m FROM shopx.orders").first()
    assert (got.n, got.m) == (42, 500)
    joined = spark.sql("SELECT count(*) FROM shopx.orders a JOIN shopx.orders b USING (id)")
    assert joined.first()[0] == 42


def test_reads_by_name_fall_back_to_the_python_source_without_a_planned_warehouse(
    conf_spark: Any, warehouse: Path
) -> None:
    from bridge.spark.native.extension import TABLE_WAREHOUSE_CONF

    spark = conf_spark
    t = make_table(warehouse, "shopy.orders", pk=False)
    commit(t, rows(5))
    dts.register(spark, warehouse=str(warehouse))
    assert "FileScan parquet" in _plan(spark.table("shopy.orders"))
    spark.conf.unset(TABLE_WAREHOUSE_CONF + "shopy.orders")
    df = spark.table("shopy.orders")
    assert "BatchScan dts" in _plan(df) and "FileScan parquet" not in _plan(df)
    assert sort(df.toArrow()) == sort(t.read())


def test_extension_conf_names_the_make_target_when_the_jar_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bridge.spark.errors import ExtensionJarMissing
    from bridge.spark.native.extension import extension_conf, extension_jar

    assert extension_conf()["spark.sql.extensions"] == "io.dts.spark.DtsExtensions"
    monkeypatch.setenv("DTS_SPARK_EXT_JAR", str(tmp_path / "none.jar"))
    assert extension_jar() == tmp_path / "none.jar"
    with pytest.raises(ExtensionJarMissing, match="make spark-ext"):
        extension_conf()


def test_register_warms_up_a_local_session_only_when_asked(conf_spark: Any) -> None:
    from bridge.spark._warm_up import JOB_GROUP, WARM_UP_CONF

    spark = conf_spark
    tracker = spark.sparkContext.statusTracker()
    dts.register(spark)
    assert list(tracker.getJobIdsForGroup(JOB_GROUP)) == []
    dts.register(spark, warm_up=True)
    first = set(tracker.getJobIdsForGroup(JOB_GROUP))
    assert first  # a Spark job scanned the warm-up file
    spark.conf.set(WARM_UP_CONF, "true")
    try:
        dts.register(spark)
    finally:
        spark.conf.unset(WARM_UP_CONF)
    warmed = set(tracker.getJobIdsForGroup(JOB_GROUP))
    assert warmed > first
    # later jobs are not filed under the warm-up's group
    spark.range(10).count()
    assert set(tracker.getJobIdsForGroup(JOB_GROUP)) == warmed


def test_alter_table_set_tblproperties_changes_the_tables_options(
    conf_spark: Any, warehouse: Path
) -> None:
    """Through the extension: the table's own options change (other engines see it: the
    Iceberg metadata is written at once), and a refused change fails the statement."""
    spark = conf_spark
    t = make_table(warehouse, "shopn.altered", pk=True)
    commit(t, rows(3))
    dts.register(spark, warehouse=str(warehouse))
    spark.sql(
        "ALTER TABLE shopn.altered SET TBLPROPERTIES "
        "('metadata.iceberg.storage' = 'table-location', 'snapshot.num-retained.min' = '4')"
    )
    options = t.schema.options
    assert options["metadata.iceberg.storage"] == "table-location"
    assert options["snapshot.num-retained.min"] == "4"
    assert (Path(t.paths.root) / "metadata" / "version-hint.text").read_text() == "1"
    versions = len(t.schema_manager.list_ids())
    spark.sql("ALTER TABLE shopn.altered UNSET TBLPROPERTIES ('snapshot.num-retained.min')")
    assert "snapshot.num-retained.min" not in t.schema.options
    assert len(t.schema_manager.list_ids()) == versions + 1  # one statement, one version
    with pytest.raises(Exception, match=r"'bucket' is fixed when the table is created"):
        spark.sql("ALTER TABLE shopn.altered SET TBLPROPERTIES ('bucket' = '8')")
    assert t.schema.options["bucket"] == "2"  # as make_table created it
    assert spark.table("shopn.altered").count() == 3
