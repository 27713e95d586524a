"""Live metric sources and a real Prometheus scraping them, for the monitoring tests.

``metric_targets`` starts every component that exports metrics (on 127.0.0.1, free ports)
over a small warehouse with real tables; ``prometheus`` starts the Debian ``prometheus``
binary with a temporary config that scrapes them every second and loads
monitoring/alerts.yml. Both are session-scoped, bounded in time, and stopped after.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from logstore.broker import EmbeddedBroker
from tests.monitoring.live import start_exporter, start_meta, start_worker

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "monitoring"
SCRAPE_INTERVAL_S = 1
START_TIMEOUT_S = 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Prometheus:
    url: str
    client: httpx.Client

    def query(self, expr: str) -> dict:  # type: ignore[type-arg]
        """Evaluate ``expr`` now; returns the API's JSON (status, data or error)."""
        r = self.client.get(f"{self.url}/api/v1/query", params={"query": expr})
        return r.json()  # type: ignore[no-any-return]

    def targets(self) -> list[dict]:  # type: ignore[type-arg]
        r = self.client.get(f"{self.url}/api/v1/targets")
        return r.json()["data"]["activeTargets"]  # type: ignore[no-any-return]

    def rules(self) -> list[dict]:  # type: ignore[type-arg]
        r = self.client.get(f"{self.url}/api/v1/rules")
        return [rule for g in r.json()["data"]["groups"] for rule in g["rules"]]


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
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            prometheus_bin,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    client = httpx.Client(timeout=10)
    try:
        _wait(lambda: client.get(f"{url}/-/ready").status_code == 200, proc, tmp)
        server = Prometheus(url, client)
        # Every target up and scraped a few times, so range functions have samples.
        _wait(
            lambda: (
                all(t["health"] == "up" for t in server.targets())
                and _min_samples(server, len(metric_targets)) >= 3
            ),
            proc,
            tmp,
        )
        yield server
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _min_samples(server: Prometheus, targets: int) -> float:
    # Successful scrapes only (up == 1), so every series has samples to take rates over.
    result = server.query("sum_over_time(up[1m])")["data"]["result"]
    if len(result) < targets:
        return 0
    return min(float(r["value"][1]) for r in result)


def _wait(ready: object, proc: subprocess.Popen[bytes], tmp: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"prometheus exited with {proc.returncode}: see {tmp / 'prometheus.log'}:\n"
                + (tmp / "prometheus.log").read_text()[-2000:]
            )
        try:
            if ready():  # type: ignore[operator]
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(
        f"prometheus not ready after {START_TIMEOUT_S}s: see {tmp / 'prometheus.log'}"
    )


def load_alert_rules() -> list[dict]:  # type: ignore[type-arg]
    doc = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]
