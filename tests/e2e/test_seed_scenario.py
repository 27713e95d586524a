"""The seed's scenario (FLIP-276), end to end with the real broker, worker, Spark and MetaService.

A CDC base table T0 gets a random changelog (inserts, updates, deletes) through its
LogStore, one barrier per second; the Faust worker (`dts worker`) flushes every barrier
into T0's FileStore and reports it. Three Spark streaming queries derive T1, T2, T3 from
T0's FileStore tier and propagate T0's barrier ids (T3's query is slower). While data
flows, reads of T1, T2, T3 at the *strong* consistent version always match T0's state at
that barrier (V11, V21, V31 together or not at all); reads at *weak* (each table's
latest) are shown to disagree at least once. Lineage shows T0 -> T1, T2, T3 and the
late-data trace names the slow query's job.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from bridge.meta.client import MetaClient
from bridge.meta.errors import NoConsistentVersion, TableNotRegistered
from filestore import Catalog
from tests.bridge.spark.support import stream_from_first_snapshot
from tests.bridge.worker.support import (
    SCHEMA,
    BackgroundProducer,
    Changelog,
    latest_barrier,
    start_worker,
    wait_for,
)

pytestmark = pytest.mark.spark

T1, T2, T3 = "db.t1", "db.t2", "db.t3"
DERIVED = [T1, T2, T3]
State = dict[int, tuple[str, int]]  # id -> (v, n)

# What each derived table holds, from T0's state: the oracle of every check below.
EXPECTED: dict[str, Callable[[State], State]] = {
    T1: lambda s: {k: (v, n) for k, (v, n) in s.items() if n % 2 == 0},  # filtered
    T2: lambda s: {k: (f"t2:{v}", n * 10) for k, (v, n) in s.items()},  # transformed
    T3: lambda s: {k: (v, n + 1) for k, (v, n) in s.items()},  # transformed, slower query
}


def _t1(df: Any) -> Any:
    return df.where(df.n % 2 == 0)


def _t2(df: Any) -> Any:
    from pyspark.sql import functions as F

    return df.withColumn("v", F.concat(F.lit("t2:"), df.v)).withColumn("n", df.n * 10)


def _t3(df: Any) -> Any:
    return df.withColumn("n", df.n + 1)


def _state(t: pa.Table) -> State:
    ids, vs, ns = (t.column(c).to_pylist() for c in ("id", "v", "n"))
    return {k: (v, n) for k, v, n in zip(ids, vs, ns, strict=True)}


def _agree(states: dict[str, State]) -> bool:
    """Do T1, T2, T3 describe one state of T0? (T2 is invertible: rebuild T0 from it.)"""
    base = {k: (v.removeprefix("t2:"), n // 10) for k, (v, n) in states[T2].items()}
    return all(states[t] == EXPECTED[t](base) for t in DERIVED)


def _derive(
    spark: Any,
    warehouse: Path,
    src: str,
    dst: str,
    transform: Callable[[Any], Any],
    ck: Path,
    meta_url: str,
    trigger: str,
) -> Any:
    """A streaming query src -> transform -> dst registered with the MetaService.

    Every query starts at T0's first snapshot and takes one barrier per micro-batch,
    so each derived table completes T0's barriers in order and they share barriers.
    """
    src_df = stream_from_first_snapshot(spark, warehouse, src, one_barrier_per_batch=True)
    return (
        transform(src_df)
        .writeStream.format("dts")
        .option("warehouse", str(warehouse))
        .option("meta.url", meta_url)
        .option("checkpointLocation", str(ck))
        .queryName(f"derive_{dst.replace('.', '_')}_{uuid.uuid4().hex[:6]}")
        .trigger(processingTime=trigger)
        .start(dst)
    )


def _check_queries(queries: dict[str, Any]) -> None:
    for name, q in queries.items():
        if not q.isActive:
            raise AssertionError(f"streaming query writing {name} stopped: {q.exception()}")


@pytest.mark.slow
@pytest.mark.kafka
def test_tables_derived_from_one_cdc_table_are_read_together_or_not_at_all(  # type: ignore[no-untyped-def]
    broker, spark, warehouse: Path, tmp_path: Path, meta_url: str
) -> None:
    from bridge import consistent_read_tables
    from bridge.spark import register
    from bridge.spark.write._checkpoint import query_id
    from bridge.spark.write.meta_jobs import finish_streaming_job
    from bridge.tables import open_log_writer

    register(spark)
    catalog = Catalog(str(warehouse))
    catalog.create_database("db")
    # T0 has a unique name: its topic lives on the session's shared broker
    t0 = catalog.create_table(
        f"db.t0_{uuid.uuid4().hex[:8]}", SCHEMA, primary_key=["id"], options={"bucket": "2"}
    )
    for name in DERIVED:  # FileStore-only sinks: Spark writes them, nothing reads their log
        catalog.create_table(
            name, SCHEMA, primary_key=["id"], options={"bucket": "1", "change-tracking": "false"}
        )

    log = Changelog(seed=7, keys=200)
    writer = open_log_writer(t0, broker.bootstrap, barrier_interval_s=None)
    producer = BackgroundProducer(writer, log, rows=30, pause_s=1.0)
    worker = start_worker(
        warehouse,
        broker.bootstrap,
        [t0.name],
        f"g-{uuid.uuid4().hex[:8]}",
        tmp_path,
        extra_args=["--meta-url", meta_url],
    )
    queries: dict[str, Any] = {}
    checkpoints: dict[str, Path] = {}
    client = MetaClient(meta_url)
    try:
        producer.__enter__()
        wait_for(lambda: latest_barrier(t0) is not None, 90, "T0's first barrier", worker)

        # T1 and T2 poll every 0.5 s, T3 every 6 s: T3 lags, so weak reads diverge
        for name, transform, trigger in (
            (T1, _t1, "0.5 seconds"),
            (T2, _t2, "0.5 seconds"),
            (T3, _t3, "6 seconds"),
        ):
            checkpoints[name] = tmp_path / f"ck-{name}"
            queries[name] = _derive(
                spark, warehouse, t0.name, name, transform, checkpoints[name], meta_url, trigger
            )

        def strong_ready() -> bool:
            _check_queries(queries)
            try:
                client.consistent_version(DERIVED)
                return True
            except (NoConsistentVersion, TableNotRegistered):  # no barrier reported yet
                return False

        wait_for(strong_ready, 90, "a first consistent version of T1, T2, T3", worker)

        strong_barriers: list[int] = []
        t3_behind = 0  # weak reads that saw T3 strictly behind T1 and T2
        weak_disagreements = 0
        spark_checked = False
        deadline = time.monotonic() + 75
        while time.monotonic() < deadline:
            _check_queries(queries)
            assert worker.proc.poll() is None, worker.tail()

            # strong: one barrier B for all three, each equal to T0's state at B
            got = consistent_read_tables(catalog, DERIVED, meta_url=meta_url)
            b = got.version.barrier
            assert b is not None and {v.barrier for v in got.version.tables} == {b}
            assert b in log.oracle, f"barrier {b} is not one of T0's barriers"
            states = {t: _state(got[t]) for t in DERIVED}
            for t in DERIVED:
                assert states[t] == EXPECTED[t](log.oracle[b]), f"{t} at barrier {b}"
            assert _agree(states)
            strong_barriers.append(b)
            lat = {v.table: v.latest_barrier for v in got.version.tables}
            if lat[T3] < min(lat[T1], lat[T2]):  # the answer names who holds back, how far
                assert got.version.held_back_by == T3
                assert got.version.holdback_ms == max(lat.values()) - lat[T3]

            # weak: each table at its own latest barrier (each right on its own) ...
            weak = consistent_read_tables(catalog, DERIVED, meta_url=meta_url, mode="weak")
            wstates = {t: _state(weak[t]) for t in DERIVED}
            for v in weak.version.tables:
                assert v.barrier is not None
                assert wstates[v.table] == EXPECTED[v.table](log.oracle[v.barrier])
            latest = {v.table: v.barrier for v in weak.version.tables}
            t3_behind += latest[T3] < min(latest[T1], latest[T2])
            # ... but together they need not describe any one state of T0
            if not _agree(wstates):
                weak_disagreements += 1
                assert len({v.barrier for v in weak.version.tables}) > 1

            if not spark_checked and len(set(strong_barriers)) >= 2:
                _check_with_spark(spark, warehouse, meta_url, log)
                spark_checked = True
            if (
                spark_checked
                and weak_disagreements >= 2
                and t3_behind
                and len(set(strong_barriers)) >= 4
            ):
                break
            time.sleep(0.5)

        print(  # shown with -s / on failure: what the loop saw
            f"strong reads {len(strong_barriers)} at {len(set(strong_barriers))} barriers, "
            f"weak disagreements {weak_disagreements}, T3 behind {t3_behind} times, "
            f"T0 at {latest_barrier(t0)} ({len(log.oracle)} barriers produced)"
        )
        assert spark_checked, f"no Spark consistent read; strong barriers {strong_barriers}"
        assert len(set(strong_barriers)) >= 4, f"strong barriers {strong_barriers}"
        assert strong_barriers == sorted(strong_barriers), "the consistent version never goes back"
        assert weak_disagreements >= 1, "weak reads never disagreed: the test cannot tell"
        assert t3_behind >= 1, "the slow query's table T3 was never seen behind T1 and T2"

        job_ids = {t: f"spark-streaming-{query_id(str(checkpoints[t]))}" for t in DERIVED}
        lineage = client.lineage(t0.name)
        edges = {(e.source, e.sink, e.job_id) for e in lineage.edges}
        assert edges == {(t0.name, t, job_ids[t]) for t in DERIVED}
        assert {n.table for n in lineage.downstream} == set(DERIVED)
        for t in DERIVED:
            assert [e.source for e in client.lineage(t).edges] == [t0.name]

        # late data: T3 lags T0 and the trace names T3 and the slow query's job
        def t3_traced() -> bool:
            trace = client.trace(T3)
            return (
                trace.origin_table == T3
                and trace.origin_job_id == job_ids[T3]
                and (trace.lag_ms or 0) > 0
            )

        wait_for(t3_traced, 20, "a trace of T3's lag to its query")
        trace = client.trace(T3)
        assert job_ids[T3] in trace.explanation and t0.name in trace.explanation
    finally:
        for q in queries.values():
            q.stop()
        for ck in checkpoints.values():
            with contextlib.suppress(Exception):  # best effort: a failure is reported already
                finish_streaming_job(meta_url, str(ck))
        client.close()
        producer.stop()
        writer.close(final_barrier=False)
        code = worker.stop()
    assert code == 0, worker.tail()


def _check_with_spark(spark: Any, warehouse: Path, meta_url: str, log: Changelog) -> None:
    """`dts.consistent_read` through Spark: a join of T1, T2, T3 equals the join computed
    from T0's state at the barrier they were read at."""
    from bridge import consistent_read

    dfs = consistent_read(spark, DERIVED, warehouse=warehouse, meta_url=meta_url)
    b = dfs.version.barrier
    assert b is not None and b in log.oracle
    for t, df in dfs.items():
        df.createOrReplaceTempView(t.replace(".", "_"))
    joined = spark.sql(
        "SELECT c.id, b.v AS v2, b.n AS n2, c.n AS n3, a.n AS n1 "
        "FROM db_t3 c FULL JOIN db_t2 b ON b.id = c.id LEFT JOIN db_t1 a ON a.id = c.id"
    ).collect()
    got = sorted(tuple(r) for r in joined)
    want = sorted(
        (k, f"t2:{v}", n * 10, n + 1, n if n % 2 == 0 else None)
        for k, (v, n) in log.oracle[b].items()
    )
    assert got == want, f"Spark join of T1, T2, T3 at barrier {b}"


@pytest.mark.parametrize("native", [True, False], ids=["native-batches", "python-source"])
def test_a_micro_batch_over_several_snapshots_keeps_the_changelog_order(  # type: ignore[no-untyped-def]
    spark, warehouse: Path, tmp_path: Path, native: bool
) -> None:
    """A derived table that catches up over several T0 snapshots ends at T0's state: every
    key's latest change wins. (Steps read by parallel tasks once let an older change land
    last.) Both read them in ONE micro-batch (the default read limit): the Python source
    each bucket's stored changelog files, in snapshot order, by one task; native
    micro-batches (the dts extension) Spark's scan of them, hash-partitioned by key and
    sorted in commit order within partitions."""
    from bridge.spark import register
    from bridge.spark.read.parts import ChangelogFilesPartition, ReadContext
    from bridge.spark.read.plan_scan import changes_partitions

    register(spark)
    spark.conf.set("spark.dts.native-streams", str(native).lower())
    catalog = Catalog(str(warehouse))
    catalog.create_database("db")
    t0, t1 = (
        catalog.create_table(n, SCHEMA, primary_key=["id"], options={"bucket": "1"})
        for n in ("db.c0", "db.c1")
    )
    ids = list(range(1000))
    for step in range(4):  # every step updates every key; the last one also deletes some
        w = t0.new_write("cdc")
        w.write(pa.table({"id": ids, "v": [f"s{step}"] * 1000, "n": [step] * 1000}, schema=SCHEMA))
        if step == 3:
            w.write(
                pa.table({"id": ids[:10], "v": ["x"] * 10, "n": [0] * 10, "_row_kind": ["-D"] * 10})
            )
        w.commit(barrier=100 + step)
    try:
        q = (
            _t3(stream_from_first_snapshot(spark, warehouse, "db.c0"))
            .writeStream.format("dts")
            .option("warehouse", str(warehouse))
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start("db.c1")
        )
        assert q.awaitTermination(120) and q.exception() is None
    finally:
        spark.conf.set("spark.dts.native-streams", "true")
    derived = [s.barrier for s in t1.snapshots() if s.commit_kind == "APPEND"]
    assert derived == [103]
    assert _state(t1.read()) == EXPECTED[T3](_state(t0.read()))
    # the stored changelog of the one bucket travels in one partition, in snapshot order
    ctx = ReadContext(str(warehouse), "db.c0", ["id", "v", "n"], SCHEMA)
    parts = changes_partitions(t0, ctx, 0, max(s.id for s in t0.snapshots()))
    assert len(parts) == 1 and isinstance(parts[0], ChangelogFilesPartition)
    assert [barrier for barrier, _ in parts[0].files] == [100, 101, 102, 103]
