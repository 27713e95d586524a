"""The demo's metrics history from a real Prometheus, when one is installed.

With a ``prometheus`` binary on PATH (Debian's ``prometheus`` package) the demo starts
one on 127.0.0.1 that scrapes the MetaService every second, and at the end asks it
(``/api/v1/query_range``) for the freshness and consistent-lag series the report
charts. Without one, or if it fails, the demo's own sampler (``metrics_history``) has
the same series.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx

from bridge.demo.metrics_history import WANTED, MetricsHistory
from logstore.broker import free_port

START_TIMEOUT_S = 30.0
_PROMETHEUS_LABELS = {"__name__", "job", "instance"}


class PrometheusUnavailable(RuntimeError):
    """No Prometheus binary, or it did not start or answer."""


class PrometheusRecorder:
    """A Prometheus server scraping ``meta_url``/metrics every second into ``work_dir``."""

    def __init__(self, meta_url: str, work_dir: Path, binary: str | None = None) -> None:
        found = binary or shutil.which("prometheus")
        if found is None:
            raise PrometheusUnavailable("no prometheus on PATH")
        self.binary = found
        self.target = urlparse(meta_url).netloc
        self.work_dir = work_dir
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PrometheusRecorder:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: dts-meta\n"
            f"    static_configs:\n      - targets: ['{self.target}']\n"
        )
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        with open(self.work_dir / "prometheus.log", "wb") as log:
            self._proc = subprocess.Popen(
                [self.binary, f"--config.file={config}",
                 f"--storage.tsdb.path={self.work_dir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._ready():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise PrometheusUnavailable(
                    f"prometheus did not start; see {self.work_dir / 'prometheus.log'}"
                )
            time.sleep(0.2)
        return self

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def history(self, start_unix: float, origin_unix: float) -> MetricsHistory:
        """Every wanted series from ``start_unix`` to now, times relative to ``origin_unix``."""
        out = MetricsHistory()
        end = time.time()
        try:
            for metric in WANTED:
                response = httpx.get(
                    f"{self.url}/api/v1/query_range",
                    params={"query": metric, "start": start_unix, "end": end, "step": "1s"},
                    timeout=10,
                )
                response.raise_for_status()
                for result in response.json()["data"]["result"]:
                    labels = {
                        k: v for k, v in result["metric"].items() if k not in _PROMETHEUS_LABELS
                    }
                    points = [(float(t) - origin_unix, float(v)) for t, v in result["values"]]
                    out.add_series(metric, labels, points)
        except (httpx.HTTPError, KeyError, ValueError) as e:
            raise PrometheusUnavailable(f"prometheus at {self.url} did not answer: {e}") from e
        return out

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def best_history(
    recorder: PrometheusRecorder | None, sampled: MetricsHistory, origin_unix: float
) -> tuple[MetricsHistory, str, str | None]:
    """Prometheus's history when it has the series, else the demo's own samples.

    Returns the history, where it came from, and why Prometheus's was not used (or None).
    """
    from bridge.demo.metrics_history import FRESHNESS

    own = "by the demo from the MetaService's /metrics"
    if recorder is None:
        return sampled, own, None
    try:
        recorded = recorder.history(origin_unix, origin_unix)
    except PrometheusUnavailable as e:
        return sampled, own, str(e)
    if not recorded.of(FRESHNESS):
        return sampled, own, f"prometheus at {recorder.url} has no {FRESHNESS} samples"
    return recorded, f"by Prometheus ({recorder.url}) from the MetaService every 1 s", None
