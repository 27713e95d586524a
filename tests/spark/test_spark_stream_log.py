"""Streaming reads of the log tier and the hybrid source against the embedded broker."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from spark_helpers import make_table, rows, sort

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def _collect(
    dts: Any, warehouse: Path, broker: Any, name: str, tier: str, ck: Path, **opts: Any
) -> list[Any]:
    got: list[Any] = []
    r = (
        dts.readStream.format("dts")
        .option("warehouse", str(warehouse))
        .option("tier", tier)
        .option("bootstrap", broker.bootstrap)
    )
    for k, v in opts.items():
        r = r.option(k, str(v))
    q = (
        r.load(name)
        .writeStream.foreachBatch(lambda df, _id: got.append(df.toArrow()))
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(120)
    assert q.exception() is None
    return got


def _table(warehouse: Path) -> tuple[Any, str]:
    name = f"db.l{uuid.uuid4().hex[:8]}"
    return make_table(warehouse, name, **{"log.topic": f"dts-test-{name}"}), name


def test_log_tier_micro_batches_end_on_barriers(
    dts: Any, warehouse: Path, broker: Any, tmp_path: Path
) -> None:
    from bridge.tables import open_log_writer

    t, name = _table(warehouse)
    with open_log_writer(t, broker.bootstrap, barrier_interval_s=None) as w:
        w.write(rows(6))
        w.barrier(1000)
        w.write(rows(3, start=6))
        w.barrier(2000)
        w.write(rows(2, start=100))  # never closed by a barrier: aborted on close
        w.abort()
    batches = _collect(
        dts, warehouse, broker, name, "log", tmp_path / "ck", maxBarriersPerTrigger=1
    )
    assert [sorted({b for b in x.column("_barrier").to_pylist()}) for x in batches] == [
        [1000],
        [2000],
    ]
    got = pa.concat_tables(batches)
    assert sorted((r["id"], r["_barrier"]) for r in got.to_pylist()) == [
        *((i, 1000) for i in range(6)),
        *((i, 2000) for i in range(6, 9)),
    ]
    assert set(got.column("_row_kind").to_pylist()) <= {"+I", "+U"}


def test_hybrid_switches_from_snapshot_to_log_without_gap_or_overlap(
    dts: Any, warehouse: Path, broker: Any, tmp_path: Path
) -> None:
    from bridge.spark.logtier import watermarks
    from bridge.tables import log_spec_for, open_log_writer

    t, name = _table(warehouse)
    spec = log_spec_for(t)
    with open_log_writer(t, broker.bootstrap, barrier_interval_s=None) as w:
        w.write(rows(5))
        w.barrier(1000)
        # what the worker does at barrier 1000: a snapshot with the offsets after its markers
        offsets = {
            p: hi for p, (_lo, hi) in watermarks(broker.bootstrap, spec.topic, spec.buckets).items()
        }
        tw = t.new_write("worker")
        tw.write(rows(5))
        tw.commit(barrier=1000, log_offsets=offsets)
        w.write(rows(4, start=5))
        w.barrier(2000)
    first = pa.concat_tables(_collect(dts, warehouse, broker, name, "hybrid", tmp_path / "ck"))
    with open_log_writer(t, broker.bootstrap, barrier_interval_s=None) as w:
        w.write(rows(2, start=20))
        w.barrier(3000)
    second = pa.concat_tables(
        _collect(dts, warehouse, broker, name, "hybrid", tmp_path / "ck")
    )  # restart
    got = pa.concat_tables([first, second])
    ids = sorted(got.column("id").to_pylist())
    assert ids == [*range(9), 20, 21]  # every row exactly once across the switch and the restart
    by_barrier = {r["id"]: r["_barrier"] for r in got.to_pylist()}
    assert [by_barrier[i] for i in (0, 5, 20)] == [1000, 2000, 3000]
    at_switch = first.filter(pa.compute.field("_barrier") == 1000).select(["id", "k", "v"])
    assert sort(at_switch) == sort(rows(5))
