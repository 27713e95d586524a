"""Spark jobs registered with a real MetaService (option `meta.url`)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from tests.bridge.spark.support import (
    commit,
    data_snapshots,
    make_table,
    rows,
    sort,
    stream_from_first_snapshot,
)

pytestmark = pytest.mark.spark


def _stream(dts: Any, warehouse: Path, src: str, dst: str, ck: Path, meta_url: str) -> Any:
    q = (
        stream_from_first_snapshot(dts, warehouse, src, one_barrier_per_batch=True)
        .writeStream.format("dts")
        .option("warehouse", str(warehouse))
        .option("meta.url", meta_url)
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start(dst)
    )
    from pyspark.errors import StreamingQueryException

    with contextlib.suppress(StreamingQueryException):  # the caller checks q.exception()
        q.awaitTermination(120)
    return q


def test_streaming_and_batch_jobs_register_report_and_exclude_second_writer(
    dts: Any, warehouse: Path, tmp_path: Path, meta_url: str
) -> None:
    from bridge.meta.client import MetaClient
    from bridge.spark.write._checkpoint import query_id
    from bridge.spark.write.meta_jobs import finish_streaming_job

    src, dst = make_table(warehouse, "db.msrc"), make_table(warehouse, "db.mdst")
    commit(src, rows(4), barrier=100)
    commit(src, rows(4, start=4), barrier=200)
    ck = tmp_path / "ck"
    q = _stream(dts, warehouse, "db.msrc", "db.mdst", ck, meta_url)
    assert q.exception() is None
    client = MetaClient(meta_url)
    job_id = f"spark-streaming-{query_id(str(ck))}"  # stable: derived from the checkpoint
    job = client.get_job(job_id)
    assert (job.kind.value, job.sources, job.sinks, job.state.value) == (
        "spark-streaming",
        ["db.msrc"],
        ["db.mdst"],
        "running",
    )
    snaps = {s.barrier: s.id for s in data_snapshots(dst)}
    reported = {b.barrier: (b.snapshot_id, b.job_id) for b in client.barriers("db.mdst")}
    assert reported == {b: (sid, job_id) for b, sid in snaps.items()} and set(snaps) == {100, 200}
    assert [e.source for e in client.lineage("db.mdst").edges] == ["db.msrc"]

    # a second writer of db.mdst is refused while the query's job runs: batch ...
    df = dts.createDataFrame(rows(2, start=50))
    with pytest.raises(Exception, match=f"already has a running writer: job {job_id}"):
        df.write.format("dts").option("warehouse", str(warehouse)).option(
            "meta.url", meta_url
        ).mode("append").save("db.mdst")
    # ... and streaming (another checkpoint = another query); its batch files are dropped
    other = _stream(dts, warehouse, "db.msrc", "db.mdst", tmp_path / "ck2", meta_url)
    assert other.exception() is not None
    assert f"already has a running writer: job {job_id}" in str(other.exception())
    assert sort(dst.read()) == sort(src.read()) and len(data_snapshots(dst)) == 2

    # the same query restarted re-attaches to its job and reports the new barrier
    commit(src, rows(2, start=8), barrier=300)
    assert _stream(dts, warehouse, "db.msrc", "db.mdst", ck, meta_url).exception() is None
    assert client.get_job(job_id).state.value == "running"
    assert max(b.barrier for b in client.barriers("db.mdst")) == 300

    # once the streaming job is finished, a batch write registers, reports and finishes
    finish_streaming_job(meta_url, str(ck))
    df.write.format("dts").option("warehouse", str(warehouse)).option("meta.url", meta_url).option(
        "meta.sources", "db.msrc"
    ).option("barrier", "400").mode("append").save("db.mdst")
    batch = [j for j in client.list_jobs() if j.kind.value == "spark-batch"]
    assert [(j.sources, j.sinks, j.state.value) for j in batch] == [
        (["db.msrc"], ["db.mdst"], "finished")
    ]
    assert client.barriers("db.mdst")[0].job_id == batch[0].job_id  # newest first
    assert dst.read().num_rows == 12
    client.close()


def test_ctas_with_meta_registers_and_finishes(dts: Any, warehouse: Path, meta_url: str) -> None:
    from bridge.meta.client import MetaClient

    df = dts.createDataFrame(rows(3))
    df.write.format("dts").option("warehouse", str(warehouse)).option("meta.url", meta_url).option(
        "create", "true"
    ).mode("append").save("db.newt")
    with MetaClient(meta_url) as client:
        jobs = client.list_jobs()
        assert [(j.kind.value, j.sinks, j.state.value) for j in jobs] == [
            ("ctas", ["db.newt"], "finished")
        ]
        # a CTAS that fails in its tasks marks its job failed and leaves no table
        from pyspark.sql import functions as F

        @F.udf("double")
        def boom(v: float) -> float:
            raise ValueError("ctas failure on purpose")

        with pytest.raises(Exception, match="ctas failure on purpose"):
            df.withColumn("v", boom("v")).write.format("dts").option(
                "warehouse", str(warehouse)
            ).option("meta.url", meta_url).option("create", "true").mode("append").save("db.badt")
        states = sorted((j.sinks[0], j.state.value) for j in client.list_jobs())
        assert states == [("db.badt", "failed"), ("db.newt", "finished")]


def _worker_link(meta_url: str, group: str, table: str) -> Any:
    """The Faust worker's real MetaService link (role flusher), registered for `table`."""
    from bridge.meta.client import MetaClient
    from bridge.worker.meta_link import MetaLink
    from bridge.worker.metrics import WorkerMetrics

    link = MetaLink(MetaClient(meta_url), group, WorkerMetrics(group), heartbeat_interval_s=0.1)
    link.add_table(table)
    link.tick()
    return link


def test_log_target_job_runs_beside_the_tables_worker(meta_url: str) -> None:
    """target.tier=log (role log-writer) writes the log the table's worker (role flusher)
    moves into the FileStore: both run registered; a second log writer, a second worker
    group and a FileStore-tier writer of the table are refused, naming the job."""
    from bridge.meta.client import MetaClient
    from bridge.spark.errors import JobRefused
    from bridge.spark.options import WriteOptions
    from bridge.spark.write import meta_jobs
    from bridge.worker.meta_link import worker_job_id

    opts = WriteOptions.parse({"warehouse": "/unused", "path": "db.w", "meta.url": meta_url})
    worker = _worker_link(meta_url, "dts-worker", "db.w")
    links = [worker]
    try:
        assert worker.registered("db.w")
        # a FileStore-tier writer beside the worker: two sources of truth
        with pytest.raises(JobRefused, match=r"job worker:dts-worker:db\.w .*two sources of truth"):
            meta_jobs.register(
                WriteOptions.parse({"warehouse": "/unused", "path": "db.w", "meta.url": meta_url}),
                "spark-batch",
                "spark-batch-1",
            )
        q1 = meta_jobs.register(
            opts, "spark-streaming", "spark-streaming-q1", ["db.s"], role=meta_jobs.LOG_WRITER
        )
        assert q1 == "spark-streaming-q1"
        with MetaClient(meta_url) as client:
            jobs = {j.job_id: (j.role.value, j.state.value) for j in client.list_jobs()}
            assert jobs == {
                "worker:dts-worker:db.w": ("flusher", "running"),
                "spark-streaming-q1": ("log-writer", "running"),
            }
            status = client.table("db.w")
            assert (status.writer_job_id, status.flusher_job_id) == (q1, "worker:dts-worker:db.w")
            # lineage comes from the log writer only
            assert [(e.source, e.job_id) for e in client.lineage("db.w").edges] == [("db.s", q1)]

        # a second log writer (another query) is refused, naming the first
        with pytest.raises(
            JobRefused, match="already has a running writer: job spark-streaming-q1"
        ):
            meta_jobs.register(opts, "spark-streaming", "spark-streaming-q2", role="log-writer")
        # a second worker group is refused, naming the first group's job
        other = _worker_link(meta_url, "other", "db.w")
        links.append(other)
        assert not other.registered("db.w")
        refusal = other.refusal("db.w")
        assert refusal is not None and "running flusher: job worker:dts-worker:db.w" in refusal
        with MetaClient(meta_url) as client:
            assert worker_job_id("other", "db.w") not in {j.job_id for j in client.list_jobs()}
    finally:
        for link in links:
            link.close(flush_timeout_s=0)


@pytest.mark.kafka
def test_log_target_stream_registers_beside_a_worker(
    dts: Any, warehouse: Path, broker: Any, tmp_path: Path, meta_url: str
) -> None:
    """A real `target.tier=log` query with `meta.url` while the table's worker job runs:
    the query registers as the table's log writer and writes its log."""
    import uuid

    from bridge.meta.client import MetaClient
    from bridge.spark.write._checkpoint import query_id
    from bridge.tables import log_spec_for
    from logstore.reader import DataBatch, LogReader

    src_name, dst_name = (f"db.{p}{uuid.uuid4().hex[:8]}" for p in ("s", "d"))
    src = make_table(warehouse, src_name)
    dst = make_table(warehouse, dst_name, **{"log.topic": f"dts-test-{dst_name}"})
    commit(src, rows(4), barrier=100)
    worker = _worker_link(meta_url, "dts-worker", dst_name)
    try:
        assert worker.registered(dst_name)
        ck = tmp_path / "ck"
        q = (
            stream_from_first_snapshot(dts, warehouse, src_name)
            .writeStream.format("dts")
            .option("warehouse", str(warehouse))
            .option("target.tier", "log")
            .option("bootstrap", broker.bootstrap)
            .option("meta.url", meta_url)
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start(dst_name)
        )
        assert q.awaitTermination(120)
        assert q.exception() is None
        with MetaClient(meta_url) as client:
            job = client.get_job(f"spark-streaming-{query_id(str(ck))}")
            assert (job.role.value, job.state.value, job.sources, job.sinks) == (
                "log-writer",
                "running",
                [src_name],
                [dst_name],
            )
            status = client.table(dst_name)
            assert status.writer_job_id == job.job_id
            assert status.flusher_job_id == f"worker:dts-worker:{dst_name}"
        with LogReader(
            broker.bootstrap, log_spec_for(dst), stop_at_end=True, idle_timeout_s=10
        ) as r:
            written = sum(e.table.num_rows for e in r if isinstance(e, DataBatch))
        assert written == 4
    finally:
        worker.close(flush_timeout_s=0)


def test_stopped_streaming_query_finishes_its_job(
    dts: Any, warehouse: Path, tmp_path: Path, meta_url: str
) -> None:
    import time

    from bridge.meta.client import MetaClient
    from bridge.spark.write._checkpoint import query_id
    from bridge.spark.write.meta_jobs import finish_jobs_on_stop

    src, dst = make_table(warehouse, "db.fsrc"), make_table(warehouse, "db.fdst")
    commit(src, rows(4), barrier=100)
    listener = finish_jobs_on_stop(dts, meta_url)
    try:
        ck = tmp_path / "ck"
        q = _stream(dts, warehouse, "db.fsrc", "db.fdst", ck, meta_url)
        assert q.exception() is None and sort(dst.read()) == sort(src.read())
        job_id = f"spark-streaming-{query_id(str(ck))}"
        with MetaClient(meta_url) as client:
            deadline = time.monotonic() + 60  # listener events are delivered asynchronously
            while client.get_job(job_id).state.value == "running":
                assert time.monotonic() < deadline, "the job was not finished by the listener"
                time.sleep(0.2)
            assert client.get_job(job_id).state.value == "finished"
            # the table is free again: a batch writer registers, writes and finishes
            dts.createDataFrame(rows(2, start=50)).write.format("dts").option(
                "warehouse", str(warehouse)
            ).option("meta.url", meta_url).mode("append").save("db.fdst")
            assert dst.read().num_rows == 6
    finally:
        dts.streams.removeListener(listener)
