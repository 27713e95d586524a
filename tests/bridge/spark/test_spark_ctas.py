"""Atomic CREATE TABLE AS SELECT (FLIP-305) through Spark and the staged-table primitive."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.bridge.spark.support import SCHEMA, commit, data_snapshots, make_table, rows, sort

pytestmark = pytest.mark.spark


def _files(warehouse: Path) -> list[Path]:
    return [p for p in warehouse.rglob("*") if p.is_file()]


def test_ctas_creates_schema_and_data_in_one_snapshot(dts: Any, warehouse: Path) -> None:
    from bridge.spark import create_table_as
    from filestore import Catalog

    df = dts.createDataFrame(rows(12)).repartition(2)
    assert create_table_as(
        dts, "db.c", df, warehouse=str(warehouse), primary_key=["id"], options={"bucket": "2"}
    )
    t = Catalog(str(warehouse)).get_table("db.c")
    assert t.schema.primary_key == ["id"] and t.schema.num_buckets == 2
    assert len(data_snapshots(t)) == 1
    assert sort(t.read()) == sort(rows(12))
    assert not (warehouse / "_staging").exists() or not any((warehouse / "_staging").iterdir())
    # IF NOT EXISTS: skipped, data untouched
    assert not create_table_as(
        dts, "db.c", df.limit(1), warehouse=str(warehouse), if_not_exists=True
    )
    assert t.read().num_rows == 12
    # plain CTAS of an existing name fails clearly
    with pytest.raises(Exception, match="already exists"):
        create_table_as(dts, "db.c", df, warehouse=str(warehouse))


def test_ctas_failing_job_leaves_no_table_and_no_file(dts: Any, warehouse: Path) -> None:
    from pyspark.sql import functions as F

    from bridge.spark import create_table_as
    from filestore import Catalog

    @F.udf("double")
    def boom(v: float) -> float:
        if v > 5:
            raise ValueError("ctas task failure on purpose")
        return v

    df = dts.createDataFrame(rows(40)).repartition(2).withColumn("v", boom("v"))
    with pytest.raises(Exception, match="ctas task failure on purpose"):
        create_table_as(dts, "db.gone", df, warehouse=str(warehouse), primary_key=["id"])
    with pytest.raises(Exception, match="gone"):
        Catalog(str(warehouse)).get_table("db.gone")
    assert _files(warehouse) == []
    # the name is free again
    assert create_table_as(dts, "db.gone", df.limit(0), warehouse=str(warehouse))


def test_df_write_create_option_and_rtas_keeps_old_until_commit(dts: Any, warehouse: Path) -> None:
    from bridge.spark import create_table_as
    from filestore import Catalog
    from filestore.staging import StagedTable

    df = dts.createDataFrame(rows(6))
    df.write.format("dts").option("warehouse", str(warehouse)).option("create", "true").mode(
        "append"
    ).save("db.r")
    cat = Catalog(str(warehouse))
    assert cat.get_table("db.r").read().num_rows == 6
    # staged replace: the old table stays readable until commit
    staged = StagedTable.begin(str(warehouse), "db.r", SCHEMA, replace=True)
    commit(staged.table, rows(3, start=50))
    assert sort(cat.get_table("db.r").read()) == sort(rows(6))
    staged.commit()
    assert sort(cat.get_table("db.r").read()) == sort(rows(3, start=50))
    # RTAS through Spark
    assert create_table_as(dts, "db.r", df.limit(2), warehouse=str(warehouse), replace=True)
    assert cat.get_table("db.r").read().num_rows == 2


def test_concurrent_staged_creates_one_wins(warehouse: Path) -> None:
    from filestore.errors import TableAlreadyExists
    from filestore.staging import StagedTable

    results: list[Any] = []
    barrier = threading.Barrier(4)

    def race() -> None:
        barrier.wait()
        try:
            results.append(StagedTable.begin(str(warehouse), "db.x", SCHEMA))
        except TableAlreadyExists as e:
            results.append(e)

    threads = [threading.Thread(target=race) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    winners = [r for r in results if isinstance(r, StagedTable)]
    losers = [r for r in results if isinstance(r, TableAlreadyExists)]
    assert len(winners) == 1 and len(losers) == 3
    assert "being created by another staged write" in str(losers[0])
    winners[0].commit()
    with pytest.raises(TableAlreadyExists, match="already exists"):
        StagedTable.begin(str(warehouse), "db.x", SCHEMA)


def test_concurrent_spark_ctas_one_wins(dts: Any, warehouse: Path) -> None:
    from bridge.spark import create_table_as
    from filestore import Catalog

    make_table(warehouse, "db.other")  # the database exists; the name does not
    errors: list[BaseException] = []
    ok: list[bool] = []

    def run(i: int) -> None:
        df = dts.createDataFrame(rows(5, start=i * 100))
        try:
            ok.append(create_table_as(dts, "db.dup", df, warehouse=str(warehouse)))
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(ok) + len(errors) == 2
    assert len(ok) == 1, errors
    assert "already exists" in str(errors[0]) or "being created" in str(errors[0])
    assert Catalog(str(warehouse)).get_table("db.dup").read().num_rows == 5
