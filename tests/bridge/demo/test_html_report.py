"""The demo's HTML report: real scrapes over HTTP, rendered by plotly, loaded in Chromium."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from bridge.demo.errors import ReportDataMissing
from bridge.demo.html_report import write_html_report
from bridge.demo.metrics_history import CONSISTENT_LAG, FRESHNESS, MetricsHistory, MetricsSampler
from tests.bridge.demo.support import load, needs_chromium

TABLES = ("demo.orders", "demo.customers", "demo.customer_totals")


@pytest.fixture
def exporter() -> Iterator[tuple[str, Gauge, Gauge]]:
    """A /metrics endpoint exporting the MetaService's two gauges (values set by the test)."""
    registry = CollectorRegistry()
    age = Gauge(FRESHNESS, "age", ["table"], registry=registry)
    lag = Gauge(CONSISTENT_LAG, "lag", ["table", "group"], registry=registry)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics", age, lag
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _sample(url: str, age: Gauge, lag: Gauge, scrapes: int) -> MetricsHistory:
    sampler = MetricsSampler(url, interval_s=0.05).start()
    try:
        deadline = time.monotonic() + 30
        step = 0
        while sampler.history.scrapes < scrapes:
            assert time.monotonic() < deadline, "the sampler stopped scraping"
            for i, table in enumerate(TABLES):
                age.labels(table).set(500 + 100 * i + step)
                lag.labels(table, "demo.orders").set(50 * i)
            step += 10
            time.sleep(0.05)
    finally:
        history = sampler.stop()
    return history


def test_sampler_keeps_every_scrape_of_both_metrics(exporter: tuple[str, Gauge, Gauge]) -> None:
    history = _sample(*exporter, scrapes=5)
    assert {s.labels["table"] for s in history.of(FRESHNESS)} == set(TABLES)
    assert {s.labels["table"] for s in history.of(CONSISTENT_LAG)} == set(TABLES)
    orders = next(s for s in history.of(FRESHNESS) if s.labels["table"] == "demo.orders")
    assert len(orders.points) >= 5
    times = [t for t, _ in orders.points]
    assert times == sorted(times)
    assert history.failures == 0


def test_sampler_counts_a_dead_endpoint_as_failed_scrapes() -> None:
    sampler = MetricsSampler("http://127.0.0.1:1/metrics", interval_s=0.01).start()
    deadline = time.monotonic() + 30
    while sampler.history.failures < 3:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    history = sampler.stop()
    assert history.scrapes == 0
    with pytest.raises(ReportDataMissing, match="no dts_meta_table_barrier_age_ms sample"):
        write_html_report(history, Path("/nonexistent/report.html"), source="nowhere")


@needs_chromium
def test_report_loads_in_chromium_without_console_errors_and_charts_have_data(
    exporter: tuple[str, Gauge, Gauge], tmp_path: Path
) -> None:
    history = _sample(*exporter, scrapes=4)
    points = sum(len(s.points) for s in history.series.values())
    path = write_html_report(
        history, tmp_path / "report.html", source="by the test", summary=["a <b> line"]
    )
    page = load(path)
    assert page.console == []
    # plotly drew both charts, one line per table, one marker per sample
    assert page.count("main-svg") >= 2
    assert page.count("trace scatter") == 2 * len(TABLES)
    assert page.count("point") == points
    assert "a &lt;b&gt; line" in page.dom


@needs_chromium
def test_the_chromium_check_sees_console_errors(tmp_path: Path) -> None:
    """The check above is not vacuous: a failing script shows on the console."""
    page_file = tmp_path / "broken.html"
    page_file.write_text("<html><body><script>notDefined();</script></body></html>")
    page = load(page_file)
    assert any("notDefined is not defined" in line for line in page.console), page.console
