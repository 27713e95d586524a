"""What the demo's services exported over the run: freshness and consistent-version lag.

The MetaService exports, per table, ``dts_meta_table_barrier_age_ms`` (now minus the
table's latest completed barrier: how fresh its FileStore is) and, per table of a
lineage group, ``dts_meta_consistent_lag_ms`` (how far the group's consistent barrier
trails the table's latest one). A Prometheus server scraping the MetaService keeps
that history; without one the demo scrapes ``/metrics`` itself, once a second, the
same text a Prometheus scrape gets.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bridge.meta.client import tls_verify

FRESHNESS = "dts_meta_table_barrier_age_ms"
CONSISTENT_LAG = "dts_meta_consistent_lag_ms"
WANTED = (FRESHNESS, CONSISTENT_LAG)


@dataclass
class Series:
    """One metric's samples for one label set: (seconds since the run started, value)."""

    metric: str
    labels: dict[str, str]
    points: list[tuple[float, float]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in sorted(self.labels.items()))


@dataclass
class MetricsHistory:
    """Every sample of the wanted metrics, by (metric, labels)."""

    series: dict[tuple[str, tuple[tuple[str, str], ...]], Series] = field(default_factory=dict)
    scrapes: int = 0
    failures: int = 0

    def add_exposition(self, text: str, at_s: float) -> None:
        """Add one scrape's samples (Prometheus text format)."""
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name not in WANTED:
                    continue
                key = (sample.name, tuple(sorted(sample.labels.items())))
                series = self.series.setdefault(key, Series(sample.name, dict(sample.labels)))
                series.points.append((at_s, float(sample.value)))
        self.scrapes += 1

    def add_series(
        self, metric: str, labels: dict[str, str], points: list[tuple[float, float]]
    ) -> None:
        """Add a whole series (a Prometheus range query's answer)."""
        key = (metric, tuple(sorted(labels.items())))
        self.series.setdefault(key, Series(metric, dict(labels))).points.extend(points)
        self.scrapes = max(self.scrapes, len(points))

    def of(self, metric: str) -> list[Series]:
        return [s for (m, _), s in sorted(self.series.items()) if m == metric]


class MetricsSampler:
    """Scrapes ``url`` every ``interval_s`` in a daemon thread until ``stop()``."""

    def __init__(
        self,
        url: str,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        started: float | None = None,
        ca_file: str | None = None,
    ) -> None:
        """``ca_file``: the CA an https ``url`` is verified with (None: the system's)."""
        self.url = url
        self._verify = tls_verify(url, ca_file)  # as the MetaService's own clients verify it
        self.interval_s = interval_s
        self.history = MetricsHistory()
        self._clock = clock
        self._started = clock() if started is None else started  # time 0 of the charts
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dts-demo-metrics", daemon=True)

    def start(self) -> MetricsSampler:
        self._thread.start()
        return self

    def stop(self) -> MetricsHistory:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        return self.history

    def scrape_once(self, client: httpx.Client) -> None:
        at = self._clock() - self._started
        try:
            response = client.get(self.url)
            response.raise_for_status()
        except httpx.HTTPError:
            # a service restarting or stopping: a gap in the charts, not a failed demo
            self.history.failures += 1
            return
        self.history.add_exposition(response.text, at)

    def _loop(self) -> None:
        with httpx.Client(timeout=5.0, verify=self._verify) as client:
            while not self._stop.is_set():
                self.scrape_once(client)
                self._stop.wait(self.interval_s)
