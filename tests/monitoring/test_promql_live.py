"""Every dashboard and alert expression, evaluated by a real Prometheus scraping live parts.

Each expression must parse, return data, and name only metrics some component exports.
"""

from __future__ import annotations

import time

import pytest

from tests.monitoring.conftest import SCRAPE_INTERVAL_S, Prometheus
from tests.monitoring.expressions import (
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


# The live stack creates these conditions on purpose (tests/monitoring/live.py).
FIRING = {
    "DtsSortedRunsNearStopTrigger": {"shop.orders"},  # 3 level-0 runs, stop trigger 3
    "DtsBarrierNotAdvancing": {"shop.stale"},  # last barrier 2 minutes old (among others)
    "DtsExporterTableErrors": {"shop.broken"},  # corrupted snapshot file
    "DtsDeadLetterRecords": None,  # one undecodable record in the worker's table log
}


@pytest.mark.parametrize("alert", sorted(FIRING))
def test_alert_fires_on_the_condition_it_watches(alert: str, prometheus: Prometheus) -> None:
    rule = next(r for r in alert_rules() if r["alert"] == alert)
    result = prometheus.query(rule["expr"])["data"]["result"]
    tables = {r["metric"]["table"] for r in result}
    expected = FIRING[alert]
    if expected is None:
        assert len(tables) == 1 and next(iter(tables)).startswith("db.t_")
    else:
        assert expected <= tables


def test_stop_trigger_alert_fires_for_a_table_at_its_stop_trigger(prometheus: Prometheus) -> None:
    # The live warehouse's shop.orders holds 3 level-0 runs per bucket, stop trigger 3.
    rule = next(r for r in alert_rules() if r["alert"] == "DtsSortedRunsNearStopTrigger")
    result = prometheus.query(rule["expr"])["data"]["result"]
    assert {r["metric"]["table"] for r in result} == {"shop.orders"}
    assert [float(r["value"][1]) for r in result] == [1.0]
