"""Static checks of monitoring/: dashboards up to date and well-formed, rules and config valid."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.bridge.monitoring.support import DASHBOARDS, MONITORING, alert_rules, alert_signal

GRAFANA = MONITORING / "grafana"


def test_dashboard_json_is_generated_from_build_dashboards() -> None:
    run = subprocess.run(
        [sys.executable, str(GRAFANA / "build_dashboards.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_three_dashboards_with_unique_uids() -> None:
    boards = {p.stem: json.loads(p.read_text()) for p in DASHBOARDS}
    assert set(boards) == {"consistency", "pipeline", "storage"}
    assert len({b["uid"] for b in boards.values()}) == 3


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_panels_use_the_provisioned_datasource(path: Path) -> None:
    datasources = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())
    uid = datasources["datasources"][0]["uid"]
    board = json.loads(path.read_text())
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert panels
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        assert panel["datasource"]["uid"] == uid, panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == uid
            assert target["expr"].strip()


def test_dashboard_provider_points_at_the_mounted_dashboards() -> None:
    providers = yaml.safe_load((GRAFANA / "provisioning/dashboards/dts.yml").read_text())
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def test_alerts_follow_the_signal_threshold_convention() -> None:
    rules = alert_rules()
    assert {r["alert"] for r in rules} >= {"DtsBarrierNotAdvancing", "DtsSortedRunsNearStopTrigger"}
    for rule in rules:
        assert alert_signal(rule["expr"])
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"]


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool (Debian package prometheus) is missing; `make test` installs it")
    return path


def test_promtool_accepts_the_alert_rules() -> None:
    run = subprocess.run(
        [_promtool(), "check", "rules", str(MONITORING / "alerts.yml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_promtool_accepts_the_compose_prometheus_config(tmp_path: Path) -> None:
    # The compose file mounts alerts.yml at /etc/prometheus; point at the repo's copy here.
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    config["rule_files"] = [str(MONITORING / "alerts.yml")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    run = subprocess.run(
        [_promtool(), "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    jobs = {c["job_name"] for c in config["scrape_configs"]}
    assert {"dts-worker", "dts-meta", "dts-exporter"} <= jobs
