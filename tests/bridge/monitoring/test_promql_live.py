"""Every dashboard and alert expression, evaluated by a real Prometheus scraping live parts.

Each expression must parse, return data, and name only metrics some component exports.
"""

from __future__ import annotations

import time

import pytest

from tests.bridge.monitoring.conftest import SCRAPE_INTERVAL_S, Prometheus
from tests.bridge.monitoring.support import (
    META_GROUP,
    META_STALL_MS,
    META_STALLED,
    META_TABLES,
    STUCK_TABLE,
    Expr,
    alert_rules,
    all_expressions,
    metric_names,
)

pytestmark = pytest.mark.kafka  # the live worker runs on the embedded broker

EXPRESSIONS = all_expressions()


@pytest.mark.parametrize("expr", EXPRESSIONS, ids=str)
def test_expression_names_only_exported_metrics(expr: Expr, exported_names: set[str]) -> None:
    names = metric_names(expr.promql)
    assert names, f"{expr}: references no dts_ metric: {expr.promql}"
    missing = names - exported_names
    assert not missing, f"{expr}: no live component exports {sorted(missing)}"


@pytest.mark.parametrize("expr", EXPRESSIONS, ids=str)
def test_expression_returns_data(expr: Expr, prometheus: Prometheus) -> None:
    answer = prometheus.query(expr.promql)
    assert answer["status"] == "success", f"{expr}: {answer.get('error')}\n{expr.promql}"
    # Scrapes are asynchronous: a busy component can miss one. Give data a few more
    # scrape intervals (bounded) before calling it missing.
    for _ in range(5):
        if not expr.needs_data or answer["data"]["result"]:
            break
        time.sleep(SCRAPE_INTERVAL_S)
        answer = prometheus.query(expr.promql)
    if expr.needs_data:
        assert answer["data"]["result"], f"{expr}: Prometheus returned no data for\n{expr.promql}"


def test_prometheus_loaded_every_alert_rule(prometheus: Prometheus) -> None:
    loaded = {r["name"]: r for r in prometheus.rules() if r["type"] == "alerting"}
    assert set(loaded) == {r["alert"] for r in alert_rules()}
    bad = {name: r.get("lastError") for name, r in loaded.items() if r["health"] == "err"}
    assert not bad


# The live stack creates these conditions on purpose (tests/bridge/monitoring/live.py):
# alert -> (label, values it must fire for); None = the worker's one table.
FIRING: dict[str, tuple[str, set[str] | None]] = {
    "DtsSortedRunsNearStopTrigger": ("table", {"shop.orders"}),  # 3 level-0 runs, trigger 3
    "DtsBarrierNotAdvancing": ("table", {"shop.stale"}),  # last barrier 2 minutes old
    "DtsExporterTableErrors": ("table", {"shop.broken"}),  # corrupted snapshot file
    "DtsDeadLetterRecords": ("table", None),  # one undecodable record in the worker's log
    "DtsConsistentLagHigh": ("group", {META_GROUP}),  # daily_revenue stopped 2 minutes ago
    "DtsWorkerTableStalled": ("table", {STUCK_TABLE}),  # its latest snapshot is corrupt
    "DtsIcebergMetadataBehind": ("table", {"shop.events"}),  # its one sync failed
}


@pytest.mark.parametrize("alert", sorted(FIRING))
def test_alert_fires_on_the_condition_it_watches(alert: str, prometheus: Prometheus) -> None:
    rule = next(r for r in alert_rules() if r["alert"] == alert)
    result = prometheus.query(rule["expr"])["data"]["result"]
    label, expected = FIRING[alert]
    values = {r["metric"][label] for r in result}
    if expected is None:
        assert len(values) == 1 and next(iter(values)).startswith("db.t_")
    else:
        assert expected <= values


def test_consistent_lag_names_the_tables_the_stalled_one_holds_back(
    prometheus: Prometheus,
) -> None:
    result = prometheus.query(f'dts_meta_consistent_lag_ms{{group="{META_GROUP}"}}')
    lag = {r["metric"]["table"]: float(r["value"][1]) for r in result["data"]["result"]}
    assert set(lag) == set(META_TABLES)
    assert lag[META_STALLED] == 0  # the table holding the group back
    assert all(v >= META_STALL_MS for t, v in lag.items() if t != META_STALLED)


def _wait_for_alert(prometheus: Prometheus, alert: str, job: str, timeout_s: float) -> None:
    rule = next(r for r in alert_rules() if r["alert"] == alert)
    deadline = time.monotonic() + timeout_s
    while True:
        result = prometheus.query(rule["expr"])["data"]["result"]
        if any(r["metric"].get("job") == job for r in result) or (job == "" and result):
            return
        assert time.monotonic() < deadline, f"{alert} did not fire within {timeout_s}s"
        time.sleep(SCRAPE_INTERVAL_S / 2)


def test_job_heartbeat_alerts_fire_for_a_silent_job(
    prometheus: Prometheus, metric_targets: dict[str, str]
) -> None:
    """A job that registers and then stays silent: late at half its timeout, then failed."""
    from bridge.meta.client import MetaClient
    from bridge.meta.models import JobState

    timeout_ms = 6_000
    failed = next(r for r in alert_rules() if r["alert"] == "DtsJobFailed")
    assert not prometheus.query(failed["expr"])["data"]["result"], "no job failed before"
    with MetaClient(f"http://{metric_targets['dts-meta']}") as client:
        # A table of its own: joining the live lineage group would empty that group's
        # consistent barrier (a table without a completed barrier holds every read back).
        job = client.register_job(
            "spark-batch",
            [],
            ["monitoring.silent"],
            job_id="monitoring-silent",
            heartbeat_timeout_ms=timeout_ms,
        )
        _wait_for_alert(prometheus, "DtsJobHeartbeatLate", job.job_id, timeout_ms / 1000 + 5)
        deadline = time.monotonic() + timeout_ms / 1000 + 10
        while client.get_job(job.job_id).state is JobState.RUNNING:
            assert time.monotonic() < deadline, "the silent job was never marked failed"
            time.sleep(0.2)
        assert "heartbeat timeout" in client.get_job(job.job_id).reason
        _wait_for_alert(prometheus, "DtsJobFailed", "", 10)


def test_stop_trigger_alert_fires_for_a_table_at_its_stop_trigger(prometheus: Prometheus) -> None:
    # The live warehouse's shop.orders holds 3 level-0 runs per bucket, stop trigger 3.
    rule = next(r for r in alert_rules() if r["alert"] == "DtsSortedRunsNearStopTrigger")
    result = prometheus.query(rule["expr"])["data"]["result"]
    assert {r["metric"]["table"] for r in result} == {"shop.orders"}
    assert [float(r["value"][1]) for r in result] == [1.0]
