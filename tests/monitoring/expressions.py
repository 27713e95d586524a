"""Every PromQL expression the monitoring config holds: dashboard panels, variables, alerts."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

MONITORING = Path(__file__).resolve().parents[2] / "monitoring"
DASHBOARDS = sorted((MONITORING / "grafana" / "dashboards").glob("*.json"))

# Grafana's variables, replaced by what Grafana would send when "All" tables are selected.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "5m",
    "${table}": ".*",
    "$table": ".*",
    "${group}": ".*",
    "$group": ".*",
}
_METRIC = re.compile(r"\bdts_[a-z0-9_]+\b")
_LABEL_VALUES = re.compile(r"^label_values\((?P<metric>[^,]+),\s*(?P<label>\w+)\)$")
# An alert is `<signal> <op> <number>` (see monitoring/alerts.yml).
_ALERT = re.compile(
    r"^(?P<signal>.+?)\s*(?P<op>>=|<=|==|!=|>|<)\s*(?P<threshold>[0-9.eE+-]+)$", re.S
)


@dataclass(frozen=True)
class Expr:
    where: str  # e.g. "storage.json: Sorted runs per bucket [A]"
    promql: str
    # An alert's full expr is empty while nothing is wrong; its signal must have data.
    needs_data: bool = True

    def __str__(self) -> str:
        return self.where


def grafana_to_promql(expr: str) -> str:
    for var, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(var, value)
    return expr


def _panels(panels: list[dict]) -> list[dict]:  # type: ignore[type-arg]
    out = []
    for p in panels:
        out.append(p)
        out.extend(_panels(p.get("panels", [])))
    return out


def dashboard_expressions() -> list[Expr]:
    exprs = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for panel in _panels(board["panels"]):
            for target in panel.get("targets", []):
                where = f"{path.name}: {panel['title']} [{target['refId']}]"
                exprs.append(Expr(where, grafana_to_promql(target["expr"])))
        for var in board.get("templating", {}).get("list", []):
            if var.get("type") != "query":
                continue
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            match = _LABEL_VALUES.match(query.strip())
            assert match, f"{path.name}: variable {var['name']}: only label_values(m, l) is used"
            # label_values(m, l) has data iff some series of m carries label l.
            promql = f"group by ({match['label']}) ({match['metric']})"
            exprs.append(Expr(f"{path.name}: variable ${var['name']}", promql))
    return exprs


def alert_rules() -> list[dict]:  # type: ignore[type-arg]
    doc = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def alert_signal(expr: str) -> str:
    """The left side of an alert's final comparison: the series the threshold applies to."""
    match = _ALERT.match(expr.strip())
    if match is None:
        raise ValueError(f"alert expr is not `<signal> <op> <number>`: {expr!r}")
    return match["signal"]


def alert_expressions() -> list[Expr]:
    exprs = []
    for rule in alert_rules():
        exprs.append(Expr(f"alert {rule['alert']}", rule["expr"], needs_data=False))
        exprs.append(Expr(f"alert {rule['alert']} (signal)", alert_signal(rule["expr"])))
    return exprs


def all_expressions() -> list[Expr]:
    return dashboard_expressions() + alert_expressions()


def metric_names(promql: str) -> set[str]:
    return set(_METRIC.findall(promql))
