"""The demo's metrics history from a real Prometheus, when one is installed.

With a ``prometheus`` binary on PATH (Debian's ``prometheus`` package) the demo starts
one on 127.0.0.1 that scrapes the MetaService every second, and at the end asks it
(``/api/v1/query_range``) for the freshness and consistent-lag series the report
charts. Without one, or if it fails, the demo's own sampler (``metrics_history``) has
the same series.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from bridge.demo.metrics_history import FRESHNESS, WANTED, MetricsHistory
from bridge.errors import PrometheusUnavailable
from bridge.prometheus_server import PrometheusServer

_PROMETHEUS_LABELS = {"__name__", "job", "instance"}


class PrometheusRecorder:
    """A Prometheus server scraping ``meta_url``/metrics every second into ``work_dir``."""

    def __init__(
        self,
        meta_url: str,
        work_dir: Path,
        binary: str | None = None,
        ca_file: str | None = None,
    ) -> None:
        """``ca_file``: the CA an https MetaService is verified with (None: the system's)."""
        url = urlparse(meta_url)
        job: dict[str, Any] = {
            "job_name": "dts-meta",
            "scheme": url.scheme,
            "static_configs": [{"targets": [url.netloc]}],
        }
        if ca_file:
            job["tls_config"] = {"ca_file": ca_file}
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [job],
        }
        self.server = PrometheusServer(config, work_dir, binary)

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> PrometheusRecorder:
        self.server.start()
        return self

    def history(self, start_unix: float, origin_unix: float) -> MetricsHistory:
        """Every wanted series from ``start_unix`` to now, times relative to ``origin_unix``."""
        out = MetricsHistory()
        end = time.time()
        for metric in WANTED:
            data = self.server.api(
                "query_range", query=metric, start=start_unix, end=end, step="1s"
            )
            for result in data["result"]:
                labels = {k: v for k, v in result["metric"].items() if k not in _PROMETHEUS_LABELS}
                points = [(float(t) - origin_unix, float(v)) for t, v in result["values"]]
                out.add_series(metric, labels, points)
        return out

    def stop(self) -> None:
        self.server.stop()


def best_history(
    recorder: PrometheusRecorder | None, sampled: MetricsHistory, origin_unix: float
) -> tuple[MetricsHistory, str, str | None]:
    """Prometheus's history when it has the series, else the demo's own samples.

    Returns the history, where it came from, and why Prometheus's was not used (or None).
    """
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


__all__ = ["PrometheusRecorder", "best_history"]
