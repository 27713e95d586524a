"""Live metric sources and a real Prometheus scraping them, for the monitoring tests.

``metric_targets`` starts every component that exports metrics (on 127.0.0.1, free ports)
over a small warehouse with real tables; ``prometheus`` starts the Debian ``prometheus``
binary with a temporary config that scrapes them every second and loads
monitoring/alerts.yml. Both are session-scoped, bounded in time, and stopped after.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bridge.prometheus_server import PrometheusServer
from logstore.broker import EmbeddedBroker
from tests.bridge.monitoring.support import start_exporter, start_meta, start_worker

REPO = Path(__file__).resolve().parents[3]
MONITORING = REPO / "monitoring"
SCRAPE_INTERVAL_S = 1


class Prometheus(PrometheusServer):
    """The test's view of a running Prometheus: targets and loaded rules besides queries."""

    def targets(self) -> list[dict]:  # type: ignore[type-arg]
        return self.api("targets")["activeTargets"]  # type: ignore[no-any-return]

    def rules(self) -> list[dict]:  # type: ignore[type-arg]
        return [rule for g in self.api("rules")["groups"] for rule in g["rules"]]


def exported_metric_names(metrics_text: str) -> set[str]:
    """Every series name a /metrics page declares (families with no samples included)."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
        "summary": ("_count", "_sum", "_created", ""),
        "gauge": ("",),
    }
    names: set[str] = set()
    for fam in text_string_to_metric_families(metrics_text):
        names.update(fam.name + s for s in suffixes.get(fam.type, ("",)))
        names.update(s.name for s in fam.samples)
    return names


@pytest.fixture(scope="session")
def metric_targets(
    tmp_path_factory: pytest.TempPathFactory, broker: EmbeddedBroker
) -> Iterator[dict[str, str]]:
    """Prometheus scrape job name -> host:port of each live component, all on one warehouse."""
    warehouse = tmp_path_factory.mktemp("monitored") / "warehouse"
    warehouse.mkdir()
    with (
        start_exporter(warehouse) as exporter,
        start_worker(warehouse, broker.bootstrap) as worker,
        start_meta(warehouse) as meta,
    ):
        yield {"dts-exporter": exporter, "dts-worker": worker, "dts-meta": meta}


@pytest.fixture(scope="session")
def exported_names(metric_targets: dict[str, str]) -> set[str]:
    """Metric names scraped from every live component's /metrics."""
    names: set[str] = set()
    for address in metric_targets.values():
        names |= exported_metric_names(httpx.get(f"http://{address}/metrics", timeout=10).text)
    return names


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.skip(
            "the prometheus binary is missing: `make test` installs it as root "
            "(apt-get install prometheus)"
        )
    return path


@pytest.fixture(scope="session")
def prometheus(
    prometheus_bin: str,
    metric_targets: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Prometheus]:
    """A real Prometheus scraping the live components every second, with our alert rules."""
    tmp = tmp_path_factory.mktemp("prometheus")
    config = {
        "global": {
            "scrape_interval": f"{SCRAPE_INTERVAL_S}s",
            "evaluation_interval": f"{SCRAPE_INTERVAL_S}s",
        },
        "rule_files": [str(MONITORING / "alerts.yml")],
        "scrape_configs": [
            {"job_name": job, "honor_labels": True, "static_configs": [{"targets": [address]}]}
            for job, address in metric_targets.items()
        ],
    }
    with Prometheus(config, tmp, prometheus_bin) as server:
        # Every target up and scraped a few times, so range functions have samples.
        server.wait_until(
            lambda: (
                all(t["health"] == "up" for t in server.targets())
                and _min_samples(server, len(metric_targets)) >= 3
            ),
            "did not scrape every target a few times",
        )
        yield server


def _min_samples(server: Prometheus, targets: int) -> float:
    # Successful scrapes only (up == 1), so every series has samples to take rates over.
    result = server.query("sum_over_time(up[1m])")["data"]["result"]
    if len(result) < targets:
        return 0
    return min(float(r["value"][1]) for r in result)


def load_alert_rules() -> list[dict]:  # type: ignore[type-arg]
    doc = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]
