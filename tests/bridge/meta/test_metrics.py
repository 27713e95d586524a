"""MetaService metrics: computed from the store on scrape, served on /metrics over real HTTP,
and announced by `dts meta serve`."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bridge.meta import graph
from bridge.meta.client import MetaClient
from bridge.meta.metrics import view_metrics
from bridge.meta.models import JobKind, JobSpec, JobState, LineageEdge, TableBarrierReport
from bridge.meta.store import Store
from tests.bridge.meta.conftest import FakeClock
from tests.bridge.support import RunningServer

T0 = 1_700_000_000_000  # barrier ids are epoch ms


def _edge(source: str, sink: str) -> LineageEdge:
    return LineageEdge(source=source, sink=sink, job_id="j", job_state=JobState.RUNNING)


def _samples(families: object) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in families  # type: ignore[attr-defined]
        for s in fam.samples
    }


def test_groups_are_lineage_components_named_after_their_roots() -> None:
    # a -> c <- b (a join of two sources), c -> d; x alone.
    edges = [_edge("db.a", "db.c"), _edge("db.b", "db.c"), _edge("db.c", "db.d")]
    groups = graph.components(edges, ["db.x", "db.a"])
    assert groups == [["db.a", "db.b", "db.c", "db.d"], ["db.x"]]
    depth = graph.depths(edges)
    assert depth == {"db.a": 0, "db.b": 0, "db.c": 1, "db.d": 2}
    assert graph.group_name(groups[0], depth) == "db.a+db.b"
    assert graph.group_name(groups[1], depth) == "db.x"


def test_depth_is_the_longest_path_from_a_root() -> None:
    # a -> b -> c and a -> c: c is two steps deep, not one.
    edges = [_edge("db.a", "db.b"), _edge("db.b", "db.c"), _edge("db.a", "db.c")]
    assert graph.depths(edges) == {"db.a": 0, "db.b": 1, "db.c": 2}


def _lineage(store: Store) -> None:
    store.register_job(JobSpec(job_id="w0", kind=JobKind.WORKER, sinks=["db.t0"]))
    store.register_job(
        JobSpec(job_id="s1", kind=JobKind.SPARK_STREAMING, sources=["db.t0"], sinks=["db.t1"])
    )
    store.register_job(
        JobSpec(job_id="s2", kind=JobKind.SPARK_STREAMING, sources=["db.t1"], sinks=["db.t2"])
    )
    reports = [
        TableBarrierReport(table=t, barrier=T0 + i * 1000, snapshot_id=i)
        for i in range(1, 4)
        for t in ("db.t0", "db.t1")
    ]
    reports.append(TableBarrierReport(table="db.t2", barrier=T0 + 1000, snapshot_id=1))
    reports.append(TableBarrierReport(table="other.solo", barrier=T0 + 500))
    store.report_barriers(reports)


def test_view_reports_jobs_barriers_groups_and_lag(store: Store, clock: FakeClock) -> None:
    clock.now = T0 + 10_000
    _lineage(store)
    store.register_job(JobSpec(job_id="old", kind=JobKind.CTAS, sinks=["db.ctas"]))
    store.end_job("old", JobState.FAILED, "boom")
    clock.advance(2_500)

    s = _samples(view_metrics(store.metrics_view()))

    assert s[("dts_meta_jobs", (("state", "running"),))] == 3
    assert s[("dts_meta_jobs", (("state", "failed"),))] == 1
    assert s[("dts_meta_jobs", (("state", "cancelled"),))] == 0  # every state has a series
    assert s[("dts_meta_jobs_heartbeat_age_seconds", (("job", "w0"), ("kind", "worker")))] == 2.5
    assert s[("dts_meta_jobs_heartbeat_timeout_seconds", (("job", "w0"), ("kind", "worker")))] == 10
    assert not any(k[0].startswith("dts_meta_jobs_heartbeat") and ("job", "old") in k[1] for k in s)

    assert s[("dts_meta_table_completed_barrier_ms", (("table", "db.t1"),))] == T0 + 3000
    assert s[("dts_meta_table_barrier_age_ms", (("table", "db.t1"),))] == 12_500 - 3000
    # t2 completed only the first barrier: the group's consistent barrier waits for it.
    group = (("group", "db.t0"),)
    assert s[("dts_meta_group_consistent_barrier_ms", group)] == T0 + 1000
    lag = {dict(k[1])["table"]: v for k, v in s.items() if k[0] == "dts_meta_consistent_lag_ms"}
    assert lag == {"db.t0": 2000, "db.t1": 2000, "db.t2": 0, "other.solo": 0}
    assert s[("dts_meta_group_consistent_barrier_ms", (("group", "other.solo"),))] == T0 + 500
    depth = (("group", "db.t0"), ("table", "db.t2"))
    assert s[("dts_meta_table_lineage_depth", depth)] == 2
    # db.ctas has no barrier: in its group, but neither group barrier nor lag is made up.
    assert ("dts_meta_group_consistent_barrier_ms", (("group", "db.ctas"),)) not in s
    # The group's answer is the strong consistent version of all its tables.
    answer = store.consistent_version(["db.t0", "db.t1", "db.t2"])
    assert answer.barrier == T0 + 1000 and answer.holdback_ms == 2000


def test_tables_fed_by_unrelated_sources_get_no_group_barrier(store: Store) -> None:
    store.register_job(
        JobSpec(job_id="j", kind=JobKind.SPARK_STREAMING, sources=["db.a", "db.b"], sinks=["db.c"])
    )
    store.report_barriers(
        [
            TableBarrierReport(table="db.a", barrier=100),
            TableBarrierReport(table="db.b", barrier=200),
            TableBarrierReport(table="db.c", barrier=150),
        ]
    )
    s = _samples(view_metrics(store.metrics_view()))
    assert not [k for k in s if k[0] == "dts_meta_group_consistent_barrier_ms"]
    assert not [k for k in s if k[0] == "dts_meta_consistent_lag_ms"]
    assert s[("dts_meta_table_completed_barrier_ms", (("table", "db.c"),))] == 150


def test_metrics_endpoint_over_http(server: RunningServer, client: MetaClient) -> None:
    _lineage(server.store)
    client.get_job("w0")
    client.heartbeat("w0")
    assert httpx.get(f"{server.url}/jobs/nobody").status_code == 404

    r = httpx.get(f"{server.url}/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    s = _samples(text_string_to_metric_families(r.text))
    assert s[("dts_meta_database_up", ())] == 1
    assert s[("dts_meta_jobs", (("state", "running"),))] == 3
    assert s[("dts_meta_group_consistent_barrier_ms", (("group", "db.t0"),))] == T0 + 1000
    assert s[("dts_meta_consistent_lag_ms", (("group", "db.t0"), ("table", "db.t0")))] == 2000
    # Requests are counted by route template, never by the raw path.
    requests = "dts_meta_requests_total"
    assert s[(requests, (("route", "/jobs/{job_id}"), ("status", "200")))] == 1
    assert s[(requests, (("route", "/jobs/{job_id}/heartbeat"), ("status", "200")))] == 1
    assert s[(requests, (("route", "/jobs/{job_id}"), ("status", "404")))] == 1
    assert not [k for k in s if k[0] == requests and "nobody" in str(k)]
    # /metrics is Prometheus' text format, not part of the JSON API description.
    assert "/metrics" not in httpx.get(f"{server.url}/openapi.json").json()["paths"]


def test_metrics_report_a_database_outage(warehouse: Path) -> None:
    store = Store.for_warehouse(warehouse)
    with RunningServer(store) as running:
        store.close()
        # Break the database under the running service: the scrape still answers.
        db = warehouse / "_meta" / "meta.db"
        db.unlink()
        db.mkdir()
        r = httpx.get(f"{running.url}/metrics")
        assert r.status_code == 200
        assert "dts_meta_database_up 0.0" in r.text


def test_serve_prints_where_to_look(warehouse: Path) -> None:
    cmd = ["meta", "serve", "--port", "0", "--warehouse", str(warehouse)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge", *cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    try:
        lines = [proc.stdout.readline() for _ in range(7)]
        text = "".join(lines)
        base = re.search(r"listening on (http://127\.0\.0\.1:\d+)", lines[0])
        assert base, text
        url = base.group(1)
        assert f"{url}/docs" in text and f"{url}/openapi.json" in text
        assert f"{url}/metrics" in text and "Ctrl-C" in text
        assert "dts_meta_jobs{" in httpx.get(f"{url}/metrics").text
        assert httpx.get(f"{url}/docs").status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
