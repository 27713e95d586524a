"""The worker and the MetaService: job per (group, table), barrier reports, outages.

A real `dts meta serve` process, the real embedded broker and a real FileStore.
"""

from __future__ import annotations

import re
import urllib.request
import uuid
from pathlib import Path

import pytest

from bridge.meta.client import MetaClient
from bridge.meta.errors import MetaError
from bridge.worker.meta_link import MetaLink, worker_job_id
from bridge.worker.metrics import WorkerMetrics
from filestore import Table
from tests.bridge.worker.support import (
    Changelog,
    create_table,
    latest_barrier,
    log_writer,
    produce,
    start_meta,
    start_worker,
    wait_for,
)


def _barrier_commits(table: Table) -> dict[int, int]:
    """barrier -> the snapshot that committed it (a compaction on top inherits the barrier)."""
    return {s.barrier: s.id for s in table.snapshots() if s.commit_kind == "APPEND"}


def _consistent(url: str, table: str) -> tuple[int | None, int | None]:
    """(barrier, snapshot id) of the table's consistent version, (None, None) if none yet."""
    try:
        with MetaClient(url, timeout_s=2) as c:
            v = c.consistent_version([table])
    except MetaError:
        return None, None
    return v.barrier, v.tables[0].snapshot_id


def test_links_of_one_group_share_a_job_another_group_is_refused(tmp_path: Path) -> None:
    meta = start_meta(tmp_path)
    links = []
    try:
        a, b, other = (
            MetaLink(MetaClient(meta.url), g, WorkerMetrics(g), heartbeat_interval_s=0.1)
            for g in ("grp", "grp", "other")
        )
        links = [a, b, other]
        for link in links:
            link.add_table("db.t")
            link.tick()
        # two processes of one deployment re-attach to one running job instead of refusing
        assert a.registered("db.t") and b.registered("db.t")
        assert not other.registered("db.t")  # a second deployment is a second flusher
        assert f"running flusher: job {worker_job_id('grp', 'db.t')}" in str(other.refusal("db.t"))
        with MetaClient(meta.url) as c:
            job = c.get_job(worker_job_id("grp", "db.t"))
            assert (job.kind, job.role, job.sinks, job.sources, job.state) == (
                "worker",
                "flusher",
                ["db.t"],
                [],
                "running",
            )
            a.report("db.t", 1000, 3)
            other.report("db.t", 1001, 4)  # refused job: reported without a job id
            a.tick()
            other.tick()
            assert a.pending == 0 and other.pending == 0
            got = {r.barrier: (r.snapshot_id, r.job_id) for r in c.barriers("db.t")}
            assert got == {1000: (3, job.job_id), 1001: (4, None)}
        refused = other.metrics.meta_errors.labels("db.t", "other", "refused")._value.get()
        assert refused == 1
    finally:
        for link in links:
            link.close(flush_timeout_s=0)
        meta.stop()


@pytest.mark.kafka
def test_worker_reports_barriers_and_commits_through_an_outage(  # type: ignore[no-untyped-def]
    broker, warehouse: Path, tmp_path: Path
) -> None:
    meta = start_meta(tmp_path)
    table = create_table(warehouse)
    log = Changelog(seed=3)
    writer = log_writer(table, broker.bootstrap)
    group = f"g-{uuid.uuid4().hex[:8]}"
    barriers = produce(writer, log, barriers=3, rows_per_barrier=100)
    worker = start_worker(
        warehouse,
        broker.bootstrap,
        [table.name],
        group,
        tmp_path,
        extra_args=["--meta-url", meta.url],
    )
    try:
        wait_for(lambda: latest_barrier(table) == barriers[-1], 60, "first barriers", worker)
        wait_for(lambda: _consistent(meta.url, table.name)[0] == barriers[-1], 30, "report", worker)
        snaps = _barrier_commits(table)
        assert _consistent(meta.url, table.name) == (barriers[-1], snaps[barriers[-1]])
        with MetaClient(meta.url) as c:
            job = c.get_job(worker_job_id(group, table.name))
            assert (job.kind, job.sinks, job.sources, job.state) == (
                "worker",
                [table.name],
                [],
                "running",
            )
            recorded = {r.barrier: r.snapshot_id for r in c.barriers(table.name)}
        assert recorded == {b: snaps[b] for b in barriers}

        # the MetaService goes away: commits go on, reports wait
        meta.stop()
        barriers += produce(writer, log, barriers=2, rows_per_barrier=100)
        wait_for(lambda: latest_barrier(table) == barriers[-1], 30, "commits, no meta", worker)
        metrics = urllib.request.urlopen(
            f"http://127.0.0.1:{worker.web_port}/metrics", timeout=5
        ).read()
        assert b"dts_worker_meta_pending_reports" in metrics

        # back on the same address and database: the queued reports arrive
        meta = start_meta(tmp_path, port=meta.port, db=meta.db)
        wait_for(
            lambda: _consistent(meta.url, table.name)[0] == barriers[-1], 30, "backlog", worker
        )
        snaps = _barrier_commits(table)
        with MetaClient(meta.url) as c:
            recorded = {r.barrier: r.snapshot_id for r in c.barriers(table.name)}
        assert recorded == {b: snaps[b] for b in barriers}
        metrics = urllib.request.urlopen(
            f"http://127.0.0.1:{worker.web_port}/metrics", timeout=5
        ).read()
        assert re.search(rb'dts_worker_meta_errors_total\{[^}]*kind="unavailable"', metrics)
    finally:
        writer.close(final_barrier=False)
        code = worker.stop()
        meta.stop()
    assert code == 0, worker.tail()
