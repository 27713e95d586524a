"""Commit paths of the `dts` sink on real local Spark: a schema change lands with the data
or not at all; a micro-batch that ends inside a source barrier commits without one; a
barrier's changes of one key are applied in the log's order."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.bridge.spark.support import (
    commit,
    into_dts,
    log_tier_reader,
    make_table,
    rows,
    sort,
)

pytestmark = pytest.mark.spark


def _wide(spark: Any, start: int) -> Any:
    return spark.createDataFrame(
        rows(2, start=start).append_column("extra", pa.array(["p", "q"], pa.string()))
    )


def _merge_write(df: Any, warehouse: Path, name: str) -> None:
    (
        df.write.format("dts")
        .option("warehouse", str(warehouse))
        .option("mergeSchema", "true")
        .mode("append")
        .save(name)
    )


def test_merge_schema_changes_the_schema_only_when_the_data_commits(
    spark: Any, warehouse: Path
) -> None:
    from pyspark.sql import functions as F

    t = make_table(warehouse, "db.ms", pk=True)
    commit(t, rows(2))
    before = t.schema

    @F.udf("long")
    def fail_on_11(i: int) -> int:
        if i == 11:
            raise ValueError("task failure on purpose")
        return i

    failing = _wide(spark, 10).withColumn("id", fail_on_11("id"))
    with pytest.raises(Exception, match="task failure on purpose"):
        _merge_write(failing, warehouse, "db.ms")
    # the failed write changed nothing: neither the schema nor the rows
    assert t.schema.id == before.id
    assert t.schema.arrow_schema.names == before.arrow_schema.names
    assert sort(t.read()) == sort(rows(2))

    _merge_write(_wide(spark, 10), warehouse, "db.ms")
    assert t.schema.id == before.id + 1
    assert t.schema.arrow_schema.names == [*before.arrow_schema.names, "extra"]
    got = {r["id"]: r["extra"] for r in t.read().to_pylist()}
    assert got == {0: None, 1: None, 10: "p", 11: "q"}
    # a later write that carries the column again publishes no further version
    _merge_write(_wide(spark, 20), warehouse, "db.ms")
    assert t.schema.id == before.id + 1 and t.read().num_rows == 6


def _copy_log_tier(
    spark: Any, warehouse: Path, broker: Any, src: str, dst: str, work: Path, **options: str
) -> None:
    """Stream every barrier of ``src``'s log tier into ``dst`` (Trigger.AvailableNow)."""
    into_dts(log_tier_reader(spark, warehouse, broker, **options).load(src), warehouse, dst,
             work / "ck")  # fmt: skip


@pytest.mark.kafka
def test_micro_batches_ending_inside_one_barrier_commit_in_order(
    spark: Any, warehouse: Path, broker: Any, tmp_path: Path
) -> None:
    """maxOffsetsPerTrigger cuts a 20-row barrier over several micro-batches: those that end
    inside it commit without a barrier (they hold part of it), the one that completes it
    commits it; no commit is refused for repeating a barrier."""
    from bridge.tables import open_log_writer

    src_name = f"db.s{uuid.uuid4().hex[:8]}"
    src = make_table(warehouse, src_name, **{"log.topic": f"dts-test-{src_name}"})
    dst = make_table(warehouse, "db.cut")
    with open_log_writer(src, broker.bootstrap, barrier_interval_s=None) as w:
        w.write(rows(20))
        w.barrier(1000)
        w.write(rows(4, start=20))
        w.barrier(2000)
    _copy_log_tier(spark, warehouse, broker, src_name, "db.cut", tmp_path, maxOffsetsPerTrigger="6")
    assert sort(dst.read()) == sort(pa.concat_tables([rows(20), rows(4, start=20)]))
    data = [s for s in dst.snapshots() if s.commit_kind != "COMPACT"]
    assert len(data) >= 4  # the barrier was really cut
    stamped = [s.barrier for s in data if s.barrier is not None]
    assert stamped == sorted(set(stamped)) and stamped[-1] == 2000
    # a read at barrier 1000 sees all of it and nothing of 2000
    at_1000 = dst.snapshot_at_barrier(1000)
    assert at_1000 is not None and at_1000.barrier == 1000
    assert sort(dst.read(snapshot_id=at_1000.id)) == sort(rows(20))


@pytest.mark.kafka
def test_a_log_tier_barrier_that_inserts_and_deletes_keys_ends_at_the_sources_state(
    spark: Any, warehouse: Path, broker: Any, tmp_path: Path
) -> None:
    """One barrier of the log holds every change of a key in sequence: inserted, updated,
    deleted, inserted again. The sink applies them in that order, so deleted keys stay
    deleted (a rule that put retractions first brought them back in the cluster test)."""
    from bridge.tables import open_log_writer

    src_name = f"db.s{uuid.uuid4().hex[:8]}"
    src = make_table(warehouse, src_name, **{"log.topic": f"dts-test-{src_name}"})
    dst = make_table(warehouse, "db.seq")

    def kind(t: pa.Table, k: str) -> pa.Table:
        return t.append_column("_row_kind", pa.array([k] * t.num_rows, pa.string()))

    with open_log_writer(src, broker.bootstrap, barrier_interval_s=None) as w:
        w.write(kind(rows(6), "+I"))
        w.write(kind(rows(6), "-U"))
        w.write(kind(rows(6, k="b"), "+U"))
        w.write(kind(rows(4, k="b"), "-D"))
        w.write(kind(rows(1, start=3, k="c"), "+I"))
        w.barrier(1000)
        w.write(kind(rows(1, start=5, k="b"), "-D"))
        w.barrier(2000)
    _copy_log_tier(spark, warehouse, broker, src_name, "db.seq", tmp_path)
    latest = dst.latest_snapshot()
    assert latest is not None and latest.barrier == 2000
    # ids 0-2 deleted, 3 deleted and inserted again, 4 updated, 5 deleted in barrier 2000
    expected = pa.concat_tables([rows(1, start=3, k="c"), rows(1, start=4, k="b")])
    assert sort(dst.read()) == sort(expected)


def test_a_keys_later_barrier_wins_when_the_two_reach_different_tasks(
    spark: Any, warehouse: Path, tmp_path: Path
) -> None:
    """A catch-up batch over two snapshots, split by barrier over two tasks: the big
    barrier-10 task writes last, after the barrier-20 task updated key 0. The writers'
    clocks let the last writer win (key 0 back at its barrier-10 value); numbers ordered
    by barrier across the tasks keep the source's state."""
    from tests.bridge.spark.support import stream_from_first_snapshot

    src = make_table(warehouse, "db.xt_src", pk=True)
    out = make_table(warehouse, "db.xt_out", pk=True)
    commit(src, rows(40_000), barrier=10)
    commit(src, rows(1).set_column(2, "v", pa.array([-1.0])), barrier=20)
    split = stream_from_first_snapshot(spark, warehouse, "db.xt_src").repartitionByRange(
        2, "_barrier"
    )
    into_dts(split, warehouse, "db.xt_out", tmp_path / "ck")
    got = out.read(filter=pa.compute.field("id") < 2).to_pylist()
    assert sorted((r["id"], r["v"]) for r in got) == [(0, -1.0), (1, 0.5)]
    assert out.read().num_rows == 40_000
