"""The report's history from a real Prometheus (Debian's ``prometheus``) scraping /metrics."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from bridge.demo.metrics_history import CONSISTENT_LAG, FRESHNESS, MetricsHistory
from bridge.demo.prometheus_history import PrometheusRecorder, best_history
from bridge.errors import PrometheusUnavailable


@pytest.fixture
def meta_metrics() -> Iterator[tuple[str, Gauge]]:
    registry = CollectorRegistry()
    age = Gauge(FRESHNESS, "age", ["table"], registry=registry)
    lag = Gauge(CONSISTENT_LAG, "lag", ["table", "group"], registry=registry)
    age.labels("demo.orders").set(1500)
    lag.labels("demo.orders_enriched", "demo.orders").set(2000)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield f"http://127.0.0.1:{server.server_port}", age
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_no_prometheus_binary_is_reported_not_raised(tmp_path: Path) -> None:
    with pytest.raises(PrometheusUnavailable, match="did not start"):
        PrometheusRecorder("http://127.0.0.1:1", tmp_path, binary="/bin/false").start()
    sampled = MetricsHistory()
    assert best_history(None, sampled, 0.0)[0] is sampled


def test_prometheus_history_has_the_scraped_series(
    meta_metrics: tuple[str, Gauge], tmp_path: Path
) -> None:
    try:
        recorder = PrometheusRecorder(meta_metrics[0], tmp_path / "prom").start()
    except PrometheusUnavailable as e:
        pytest.skip(f"no Prometheus here: {e}")
    origin = time.time()
    try:
        deadline = time.monotonic() + 60
        while True:
            history, source, why = best_history(recorder, MetricsHistory(), origin - 5)
            fresh = history.of(FRESHNESS)
            if fresh and len(fresh[0].points) >= 3:
                break
            assert time.monotonic() < deadline, f"no samples in Prometheus: {why}"
            time.sleep(1)
    finally:
        recorder.stop()
    assert source.startswith("by Prometheus (http://127.0.0.1:")
    assert why is None
    assert fresh[0].labels == {"table": "demo.orders"}  # no job/instance labels in charts
    assert {v for _, v in fresh[0].points} == {1500.0}
    lag = history.of(CONSISTENT_LAG)
    assert lag and lag[0].labels == {"table": "demo.orders_enriched", "group": "demo.orders"}
