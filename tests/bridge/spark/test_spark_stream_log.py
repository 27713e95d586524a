"""Streaming reads of the log tier and the hybrid source against the embedded broker."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.bridge.spark.support import (
    commit,
    committed_ends,
    make_table,
    rows,
    sort,
    stream_from_first_snapshot,
)

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


def _into_log(writer: Any, warehouse: Path, broker: Any, checkpoint: Path, table: str) -> None:
    """Run a stream to its end into ``table``'s log (target.tier=log)."""
    q = (
        writer.format("dts")
        .option("warehouse", str(warehouse))
        .option("target.tier", "log")
        .option("bootstrap", broker.bootstrap)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(table)
    )
    assert q.awaitTermination(120)
    assert q.exception() is None


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


def _commit_as_worker(t: Any, broker: Any, data: pa.Table, barrier: int) -> None:
    """What the worker does at a barrier: a snapshot of `data` with the log offsets after
    the barrier's markers."""
    from bridge.tables import log_spec_for

    spec = log_spec_for(t)
    tw = t.new_write("worker")
    tw.write(data)
    tw.commit(
        barrier=barrier, log_offsets=committed_ends(broker.bootstrap, spec.topic, spec.buckets)
    )


def test_hybrid_switches_from_snapshot_to_log_without_gap_or_overlap(
    dts: Any, warehouse: Path, broker: Any, tmp_path: Path
) -> None:
    from bridge.tables import open_log_writer

    t, name = _table(warehouse)
    with open_log_writer(t, broker.bootstrap, barrier_interval_s=None) as w:
        w.write(rows(5))
        w.barrier(1000)
        _commit_as_worker(t, broker, rows(5), 1000)
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


def test_hybrid_while_producer_keeps_writing_has_no_gap_no_overlap(
    dts: Any, warehouse: Path, broker: Any, tmp_path: Path
) -> None:
    """A producer closes a barrier every ~50 ms the whole time; the FileStore snapshot is
    committed (as the worker does) from a LogReader stopped exactly at one barrier, with the
    offsets it reached; the hybrid stream's rows (snapshot, then log) equal what was written."""
    import threading

    from bridge.tables import log_spec_for, open_log_writer
    from logstore.reader import DataBatch, LogReader

    t, name = _table(warehouse)
    spec = log_spec_for(t)
    written: list[tuple[int, pa.Table]] = []  # (barrier, rows) in barrier order
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            with open_log_writer(t, broker.bootstrap, barrier_interval_s=None) as w:
                i = 0
                while not stop.is_set():
                    batch = rows(20, start=i * 20)
                    w.write(batch)
                    written.append((w.barrier(), batch))
                    i += 1
                    stop.wait(0.05)
        except BaseException as e:
            errors.append(e)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        deadline = time.monotonic() + 30
        while len(written) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        switch = written[len(written) - 1][0]
        # the worker's job at barrier `switch`: rows of barriers <= switch, offsets after its markers
        with LogReader(broker.bootstrap, spec, until_barrier=switch, idle_timeout_s=20) as r:
            data = [ev.table for ev in r if isinstance(ev, DataBatch)]
            offsets = r.positions()
        tw = t.new_write("dts-worker")
        tw.write(pa.concat_tables(data).select(["id", "k", "v", "_row_kind"]))
        tw.commit(barrier=switch, log_offsets=offsets, identifier=switch)

        got: list[pa.Table] = []
        q = (
            dts.readStream.format("dts")
            .option("warehouse", str(warehouse))
            .option("tier", "hybrid")
            .option("bootstrap", broker.bootstrap)
            .load(name)
            .writeStream.foreachBatch(lambda df, _id: got.append(df.toArrow()))
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            time.sleep(3)  # micro-batches run while the producer keeps writing
            stop.set()
            producer.join(timeout=30)
            assert not errors, errors
            last = written[-1][0]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                seen = [b for x in got for b in x.column("_barrier").to_pylist()]
                if seen and max(seen) >= last:
                    break
                assert q.exception() is None
                time.sleep(0.2)
        finally:
            q.stop()
    finally:
        stop.set()
        producer.join(timeout=30)
    assert switch < last and len(got) >= 2  # the switch happened mid-stream
    out = pa.concat_tables(got)
    want = pa.concat_tables([b for _, b in written])
    assert sort(out.select(["id", "k", "v"])) == sort(want)  # no gap, no overlap
    barrier_of = {r["id"]: b for b, tbl in written for r in tbl.select(["id"]).to_pylist()}
    got_barriers = {r["id"]: r["_barrier"] for r in out.select(["id", "_barrier"]).to_pylist()}
    for i, b in got_barriers.items():  # the snapshot's rows carry the switch barrier
        assert b == (switch if barrier_of[i] <= switch else barrier_of[i])


def test_log_target_sink_writes_rows_and_source_barriers(
    dts: Any, warehouse: Path, broker: Any, tmp_path: Path
) -> None:
    """target.tier=log: a file-tier stream written into another table's log in one
    transaction per micro-batch, closed by markers carrying the source barrier; partition =
    FileStore bucket of the bucket-key columns."""
    from bridge.tables import bucketer_for, log_spec_for
    from logstore.reader import BarrierPassed, DataBatch, LogReader

    src, src_name = _table(warehouse)
    dst_name = f"db.d{uuid.uuid4().hex[:8]}"
    dst = make_table(
        warehouse,
        dst_name,
        pk=False,
        buckets=3,
        **{"log.topic": f"dts-test-{dst_name}", "bucket-key": "k"},
    )
    commit(src, rows(8), barrier=100)
    commit(src, rows(4, start=8, k="b"), barrier=200)

    def run() -> None:
        source = stream_from_first_snapshot(dts, warehouse, src_name, one_barrier_per_batch=True)
        _into_log(source.writeStream, warehouse, broker, tmp_path / "ck", dst_name)

    run()
    commit(src, rows(2, start=20, k="c"), barrier=300)
    run()  # restart from the checkpoint: only barrier 300 is new
    spec = log_spec_for(dst)
    with LogReader(broker.bootstrap, spec, stop_at_end=True, idle_timeout_s=10) as r:
        events = list(r)
    data = pa.concat_tables([e.table for e in events if isinstance(e, DataBatch)])
    markers = [e for e in events if isinstance(e, BarrierPassed)]
    assert sort(data.select(["id", "k", "v"])) == sort(
        pa.concat_tables([rows(8), rows(4, start=8, k="b"), rows(2, start=20, k="c")])
    )
    assert sorted({(m.partition, m.barrier) for m in markers}) == [
        (p, b) for p in range(3) for b in (100, 200, 300)
    ]
    assert len(markers) == 9  # one marker per partition per barrier: no replayed batch
    by_id = {r["id"]: r["_barrier"] for r in data.select(["id", "_barrier"]).to_pylist()}
    assert [by_id[i] for i in (0, 8, 20)] == [100, 200, 300]
    want_part = bucketer_for(dst)(data.select(["id", "k", "v"]))
    assert data.column("_partition").to_pylist() == [int(x) for x in want_part]


def test_log_range_reads_reuse_one_kept_consumer_per_partition(
    warehouse: Path, broker: Any
) -> None:
    """Executor side, against the real broker: consecutive ranges of a partition are read
    through one kept consumer (positioned where the last range ended, rows fetched ahead
    kept), a rewound range seeks it, and every range yields exactly its rows."""
    from bridge.spark.options.schema import spark_arrow_schema, spark_schema
    from bridge.spark.read import log as read_log
    from bridge.spark.read.parts import LogPartition
    from bridge.spark.read.plan_log import LogScanner
    from bridge.tables import log_spec_for, open_log_writer

    name = f"db.k{uuid.uuid4().hex[:8]}"
    t = make_table(warehouse, name, buckets=1, **{"log.topic": f"dts-test-{name}"})
    spec = log_spec_for(t)
    with open_log_writer(t, broker.bootstrap, barrier_interval_s=None) as w:
        for i in range(3):
            w.write(rows(5, start=i * 5))
            w.barrier(100 + i)
    scanner = LogScanner(broker.bootstrap, spec.topic, 1)
    scanner.scan({0: 0})
    ends = [b.ends[0] for b in scanner.complete_barriers({0: 0})]
    markers = scanner.markers_between(0, 0, 2**62)
    scanner.close()
    target = spark_arrow_schema(spark_schema(t.schema.arrow_schema, metadata_columns=True))

    def read(start: int, end: int) -> list[int]:
        part = LogPartition(
            broker.bootstrap, spec, 0, start, end, markers, target, ["id", "k", "v"]
        )
        out = [b for b in read_log.read_log_range(part)]
        return sorted(pa.Table.from_batches(out, target).column("id").to_pylist()) if out else []

    read_log._KEPT.clear()
    assert read(0, ends[0]) == list(range(5))
    kept = read_log._KEPT[(broker.bootstrap, spec.topic, 0)]
    assert read(ends[0], ends[1]) == list(range(5, 10))  # continues where it stopped
    assert read(ends[1], ends[2]) == list(range(10, 15))
    assert read(0, ends[1]) == list(range(10))  # a rewind (a restarted query) seeks
    assert read_log._KEPT[(broker.bootstrap, spec.topic, 0)] is kept and len(read_log._KEPT) == 1
    read_log._KEPT.clear()
    kept.consumer.close()


def _changes(data: pa.Table, kind: str) -> pa.Table:
    return data.append_column("_row_kind", pa.array([kind] * data.num_rows, pa.string()))


def _kinds(batch: pa.Table) -> list[tuple[str, int, float]]:
    return sorted((r["_row_kind"], r["id"], r["v"]) for r in batch.to_pylist())


def _upsert_history(t: Any, broker: Any) -> None:
    """Barrier 1000 committed to the FileStore as the worker would; 2000 and 3000 only
    in the log (upserts: the log stores no -U; deletes as full -D rows)."""
    from bridge.tables import open_log_writer

    with open_log_writer(t, broker.bootstrap, barrier_interval_s=None) as w:
        w.write(rows(4))
        w.barrier(1000)
        _commit_as_worker(t, broker, rows(4), 1000)
        changed = rows(2).set_column(2, "v", pa.array([10.0, 11.0]))
        w.write(pa.concat_tables([_changes(changed, "+U"), _changes(rows(1, start=2), "-D")]))
        w.barrier(2000)
        again = rows(1).set_column(2, "v", pa.array([20.0]))
        w.write(pa.concat_tables([_changes(again, "+U"), _changes(rows(1, start=2), "+I")]))
        w.barrier(3000)


def _barriers_2000_and_3000(
    dts: Any, warehouse: Path, broker: Any, name: str, ck: Path
) -> list[pa.Table]:
    """A log-tier stream from barrier 1000 on, one barrier a micro-batch: 2000, then 3000."""
    batches = _collect(
        dts, warehouse, broker, name, "log", ck,
        maxBarriersPerTrigger=1, **{"scan.mode": "from-barrier", "scan.barrier": 1000},
    )  # fmt: skip
    assert [sorted(set(b.column("_barrier").to_pylist())) for b in batches] == [[2000], [3000]]
    return batches


def test_an_upsert_log_streams_as_a_full_changelog(
    dts: Any, warehouse: Path, broker: Any, tmp_path: Path
) -> None:
    """The log stores upserts; a log-tier stream gives -U/+U and full -D rows, the old rows
    taken from the FileStore snapshot of barrier 1000 and, for barrier 3000, from the log
    records of barrier 2000 no snapshot holds yet (replayed): what a filter or an
    aggregation that retracts needs."""
    t, name = _table(warehouse)
    _upsert_history(t, broker)
    batches = _barriers_2000_and_3000(dts, warehouse, broker, name, tmp_path / "ck")
    assert _kinds(batches[0]) == [
        ("+U", 0, 10.0), ("+U", 1, 11.0), ("-D", 2, 1.0), ("-U", 0, 0.0), ("-U", 1, 0.5),
    ]  # fmt: skip
    assert _kinds(batches[1]) == [("+I", 2, 1.0), ("+U", 0, 20.0), ("-U", 0, 10.0)]


def test_a_truncate_streams_as_the_removal_of_every_row_then_held(
    dts: Any, warehouse: Path, broker: Any, tmp_path: Path
) -> None:
    """A truncate in the log (Debezium's `op: t`, a complete-mode sink) reaches a log-tier
    stream as full -D rows of every row the table held, the committed ones its range never
    names included; rows after it are new (+I)."""
    from bridge.tables import open_log_writer

    t, name = _table(warehouse)
    with open_log_writer(t, broker.bootstrap, barrier_interval_s=None) as w:
        w.write(rows(4))
        w.barrier(1000)
        _commit_as_worker(t, broker, rows(4), 1000)
        w.write(_changes(rows(1).set_column(2, "v", pa.array([10.0])), "+U"))
        w.truncate()
        w.write(rows(2, start=10))
        w.barrier(2000)
        w.write(_changes(rows(1, start=10).set_column(2, "v", pa.array([7.0])), "+U"))
        w.barrier(3000)
    batches = _barriers_2000_and_3000(dts, warehouse, broker, name, tmp_path / "ck")
    assert _kinds(batches[0]) == [
        ("+I", 10, 5.0), ("+I", 11, 5.5), ("+U", 0, 10.0),
        ("-D", 0, 10.0), ("-D", 1, 0.5), ("-D", 2, 1.0), ("-D", 3, 1.5), ("-U", 0, 0.0),
    ]  # fmt: skip
    assert _kinds(batches[1]) == [("+U", 10, 7.0), ("-U", 10, 5.0)]


def test_log_normalize_false_streams_the_upserts_as_stored(
    dts: Any, warehouse: Path, broker: Any, tmp_path: Path
) -> None:
    t, name = _table(warehouse)
    _upsert_history(t, broker)
    batches = _collect(
        dts, warehouse, broker, name, "log", tmp_path / "ck", maxBarriersPerTrigger=1,
        **{"scan.mode": "from-barrier", "scan.barrier": 1000, "log.normalize": "false"},
    )  # fmt: skip
    assert _kinds(batches[0]) == [("+I", 0, 10.0), ("+I", 1, 11.0), ("-D", 2, 1.0)]
    assert _kinds(batches[1]) == [("+I", 0, 20.0), ("+I", 2, 1.0)]


def test_log_target_sink_in_complete_mode_truncates_then_writes_the_result(
    dts: Any, warehouse: Path, broker: Any, tmp_path: Path
) -> None:
    """Complete mode into a table's log: each micro-batch's transaction holds a truncate
    record on every partition, then the whole result, then the barrier's markers; so the
    log after its last truncate is the aggregate, without a group that left it."""
    from pyspark.sql import functions as F

    from bridge.tables import log_spec_for
    from logstore.reader import BarrierPassed, DataBatch, LogReader, Truncated

    src, src_name = _table(warehouse)
    dst_name = f"db.c{uuid.uuid4().hex[:8]}"
    dst = make_table(
        warehouse, dst_name, pk=False, buckets=2, **{"log.topic": f"dts-test-{dst_name}"}
    )
    commit(src, rows(12), barrier=100)  # groups a, a0, a1, a2
    gone = [i for i in range(12) if i % 2 == 0 and i % 3 == 0]
    sign = F.when(F.col("_row_kind").isin("-U", "-D"), -1).otherwise(1)

    def run() -> None:
        totals = (
            stream_from_first_snapshot(dts, warehouse, src_name, one_barrier_per_batch=True)
            .groupBy("k")
            .agg(F.sum(sign).alias("id"), F.sum(sign * F.col("v")).alias("v"))
            .where(F.col("id") > 0)
        )
        writer = totals.writeStream.outputMode("complete")
        _into_log(writer, warehouse, broker, tmp_path / "ck", dst_name)

    run()
    deletes = rows(12).take(gone).append_column("_row_kind", pa.array(["-D"] * len(gone)))
    commit(src, deletes, barrier=200)  # group a0 loses every row
    run()
    with LogReader(broker.bootstrap, log_spec_for(dst), stop_at_end=True, idle_timeout_s=10) as r:
        events = list(r)
    after: list[dict[str, Any]] = []
    for p in range(2):  # per partition: its rows after its last truncate
        marks = [i for i, e in enumerate(events) if isinstance(e, Truncated) and e.partition == p]
        assert len(marks) == 2  # one per micro-batch
        after += [
            row
            for e in events[marks[-1] + 1 :]
            if isinstance(e, DataBatch)
            for row in e.table.to_pylist()
            if row["_partition"] == p
        ]
    assert {r["k"]: r["id"] for r in after} == {"a": 6, "a1": 2, "a2": 2}
    assert len(after) == 3
    marked = {(e.partition, e.barrier) for e in events if isinstance(e, BarrierPassed)}
    assert sorted(marked) == [(p, b) for p in range(2) for b in (100, 200)]


def test_a_complete_mode_log_read_back_on_the_log_tier_folds_to_the_result(
    dts: Any, warehouse: Path, broker: Any, tmp_path: Path
) -> None:
    """Complete mode into a primary-key table's log truncates it every micro-batch; a
    log-tier stream of that table (no worker has committed it: the state is the log from
    offset 0) reads each truncate as the removal of the previous result, so folding its
    changelog gives the last result, without the rows that left it."""
    from pyspark.sql import functions as F

    src, src_name = _table(warehouse)
    _, dst_name = _table(warehouse)
    commit(src, rows(12), barrier=100)
    gone = [i for i in range(12) if i % 3 == 0]
    sign = F.when(F.col("_row_kind").isin("-U", "-D"), -1).otherwise(1)

    def run() -> None:
        live = (
            stream_from_first_snapshot(dts, warehouse, src_name, one_barrier_per_batch=True)
            .groupBy("id")
            .agg(F.max("k").alias("k"), F.sum(sign * F.col("v")).alias("v"), F.sum(sign).alias("n"))
            .where(F.col("n") > 0)
            .drop("n")
        )
        _into_log(
            live.writeStream.outputMode("complete"), warehouse, broker, tmp_path / "ck", dst_name
        )

    run()
    deletes = rows(12).take(gone).append_column("_row_kind", pa.array(["-D"] * len(gone)))
    commit(src, deletes, barrier=200)
    run()
    batches = _collect(dts, warehouse, broker, dst_name, "log", tmp_path / "read")
    folded: dict[int, float] = {}
    for r in pa.concat_tables(batches).sort_by([("_barrier", "ascending")]).to_pylist():
        if r["_row_kind"] in ("+I", "+U"):
            assert r["id"] not in folded  # a changelog never inserts a live key again
            folded[r["id"]] = r["v"]
        else:
            assert folded.pop(r["id"]) == r["v"]  # retracts exactly the row it held
    assert folded == {i: i * 0.5 for i in range(12) if i not in gone}
