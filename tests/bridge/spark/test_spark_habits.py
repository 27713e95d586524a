"""Issue 14 on real local Spark: empty scans, session-conf defaults, options honoured or refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from bridge.spark.registration import register
from tests.bridge.spark.support import commit, make_table, rows, sort

pytestmark = pytest.mark.spark


def _read(spark: Any, warehouse: Path | None, name: str = "db.t", **opts: Any) -> Any:
    r = spark.read.format("dts")
    if warehouse is not None:
        r = r.option("warehouse", str(warehouse))
    for k, v in opts.items():
        r = r.option(k, str(v))
    return r.load(name)


def test_empty_scans_return_empty_results(spark: Any, warehouse: Path) -> None:
    empty = make_table(warehouse, "db.empty")
    assert _read(spark, warehouse, "db.empty").count() == 0
    t = make_table(warehouse, "db.t", pk=True, buckets=2)
    commit(t, rows(10), barrier=1)
    commit(t, rows(5, start=3, k="b"), barrier=2)
    assert _read(spark, warehouse).where("id > 1000").count() == 0
    assert empty.latest_snapshot() is None
    last = t.latest_snapshot().id
    assert _read(spark, warehouse, changes=f"{last},{last}").count() == 0
    t.compact(full=True)
    compacted = t.latest_snapshot()
    assert compacted.commit_kind == "COMPACT"
    # a range holding only the compaction changes no row
    assert _read(spark, warehouse, changes=f"{last},{compacted.id}").count() == 0
    # a micro-batch that covers only the compaction snapshot
    stream = (
        spark.readStream.format("dts")
        .option("warehouse", str(warehouse))
        .option("tier", "file")
        .option("scan.mode", "from-snapshot")
        .option("scan.snapshot-id", str(compacted.id))
        .load("db.t")
    )
    q = stream.writeStream.format("memory").queryName("empty_compact").trigger(availableNow=True)
    handle = q.start()
    assert handle.awaitTermination(120)
    assert handle.exception() is None
    assert spark.table("empty_compact").count() == 0


def test_session_confs_are_defaults_of_reads_and_writes(conf_spark: Any, warehouse: Path) -> None:
    spark = conf_spark
    t = make_table(warehouse, "db.t", pk=True)
    commit(t, rows(4))
    spark.conf.set("spark.dts.warehouse", str(warehouse))
    register(spark)
    assert _read(spark, None).count() == 4
    more = spark.createDataFrame(rows(2, start=100))
    more.write.format("dts").mode("append").save("db.t")
    assert t.read().num_rows == 6
    # an explicit option still wins over the conf
    other = warehouse.parent / "other"
    other.mkdir()
    with pytest.raises(Exception, match="does not exist"):
        _read(spark, other).count()


def test_delta_time_travel_options_are_honoured(spark: Any, warehouse: Path) -> None:
    t = make_table(warehouse)
    s1 = commit(t, rows(3), barrier=10)
    commit(t, rows(1, start=3), barrier=20)
    assert _read(spark, warehouse).count() == 4
    assert sort(_read(spark, warehouse, versionAsOf=s1.id).toArrow()) == sort(rows(3))
    assert _read(spark, warehouse, timestampAsOf=s1.time_millis).count() == 3
    with pytest.raises(Exception, match="unknown read option 'snapshot-idd'"):
        _read(spark, warehouse, **{"snapshot-idd": 1}).count()


def test_read_change_feed_has_delta_change_types(spark: Any, warehouse: Path) -> None:
    t = make_table(warehouse)
    s1 = commit(t, rows(3), barrier=10)
    w = t.new_write("test")
    w.write(pa.table({"id": [1, 2], "k": ["x", "x"], "v": [9.0, 9.0], "_row_kind": ["+U", "-D"]}))
    s2 = w.commit(barrier=20)
    df = _read(spark, warehouse, readChangeFeed="true", startingVersion=s2.id)
    got = sorted((r["id"], r["_row_kind"], r["_change_type"]) for r in df.toArrow().to_pylist())
    assert (1, "+U", "update_postimage") in got and (2, "-D", "delete") in got
    assert all(kind != "+I" for _id, kind, _t in got)  # only version s2's changes
    everything = _read(
        spark, warehouse, readChangeFeed="true", startingVersion=1, endingVersion=s1.id
    )
    types = {r["_change_type"] for r in everything.toArrow().to_pylist()}
    assert types == {"insert"} and everything.count() == 3


def test_writes_refuse_unknown_columns_unless_merge_schema(spark: Any, warehouse: Path) -> None:
    t = make_table(warehouse, "db.w", pk=True)
    commit(t, rows(2))
    wide = spark.createDataFrame(rows(2, start=10).append_column("extra", pa.array(["p", "q"])))
    with pytest.raises(Exception, match=r"columns \['extra'\] are not in table db.w.*mergeSchema"):
        wide.write.format("dts").option("warehouse", str(warehouse)).mode("append").save("db.w")
    assert t.read().num_rows == 2
    (
        wide.write.format("dts")
        .option("warehouse", str(warehouse))
        .option("mergeSchema", "true")
        .mode("append")
        .save("db.w")
    )
    got = {r["id"]: r["extra"] for r in _read(spark, warehouse, "db.w").toArrow().to_pylist()}
    assert got == {0: None, 1: None, 10: "p", 11: "q"}


def test_creating_write_options_are_checked(spark: Any, warehouse: Path) -> None:
    df = spark.createDataFrame(rows(6))

    def writer() -> Any:  # DataFrameWriter mutates itself: a fresh one per attempt
        return df.write.format("dts").option("warehouse", str(warehouse)).option("create", "true")

    with pytest.raises(Exception, match="did you mean 'primary-key'"):
        writer().option("primary-keys", "id").mode("append").save("db.c")
    from filestore import Catalog

    assert not Catalog(str(warehouse)).table_exists("db.c")
    # Spark itself refuses DataFrameWriter.partitionBy() for a Python data source (it
    # checks it against a table it thinks is unpartitioned): the option says the same
    with pytest.raises(Exception, match="partitioning"):
        writer().option("primary-key", "id").partitionBy("k").mode("append").save("db.c")
    writer().option("primary-key", "id").option("partitionBy", "k").mode("append").save("db.c")
    t = Catalog(str(warehouse)).get_table("db.c")
    assert t.primary_key == ["id"] and t.partition_keys == ["k"]
    assert t.read().num_rows == 6


def test_stream_setup_errors_surface_as_option_errors(spark: Any, warehouse: Path) -> None:
    make_table(warehouse, "db.s")
    stream = (
        spark.readStream.format("dts")
        .option("warehouse", str(warehouse))
        .option("tier", "file")
        .schema("id long")  # drops the metadata columns a stream needs
        .load("db.s")
    )
    q = stream.writeStream.format("memory").queryName("bad_setup").start()
    try:
        with pytest.raises(Exception) as failed:
            q.awaitTermination(120)
        err = str(failed.value)
    finally:
        q.stop()
    assert "OptionError" in err and "metadata columns" in err
    assert "UnboundLocalError" not in err
