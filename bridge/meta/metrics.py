"""Prometheus metrics of the MetaService, served on ``/metrics`` by :mod:`bridge.meta.server`.

State metrics are computed on every scrape from the database (:class:`MetaCollector`), so
several service instances on one PostgreSQL report the same numbers (dashboards take
``max by`` over instances) and a restarted service loses nothing. Only the request counter
lives in the process. Names follow ``dts_<part>_<what>_<unit>`` (docs/internals.md).

Table groups are the connected components of the lineage graph, named after their root
(source) tables joined by ``+``; a table without lineage is a group of its own. A group's
consistent barrier is the greatest barrier every table of the group completed: what a
strong consistent read of the whole group gets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bridge.meta.store import MetricsView, Store

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class MetaCollector(Collector):
    """Reads the store on each scrape; a database error yields ``dts_meta_database_up 0``."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def describe(self) -> Iterator[Metric]:
        # Registering must not query the database; an empty describe() tells the registry so.
        return iter(())

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        up = GaugeMetricFamily(
            "dts_meta_database_up", "1 if the last scrape could read the MetaService database."
        )
        try:
            view = self._store.metrics_view()
        except Exception as exc:  # report the outage instead of failing the whole scrape
            log.warning("MetaService metrics: cannot read the database: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from view_metrics(view)
        duration = GaugeMetricFamily(
            "dts_meta_scrape_duration_seconds", "Time the last scrape took to read the database."
        )
        duration.add_metric([], time.perf_counter() - started)
        yield duration


def view_metrics(view: MetricsView) -> list[Metric]:
    """The metric families of one :class:`MetricsView` (pure: unit-testable)."""
    jobs = GaugeMetricFamily("dts_meta_jobs", "Registered jobs by state.", labels=["state"])
    for state, n in sorted(view.jobs_by_state.items()):
        jobs.add_metric([state], n)
    job_labels = ["job", "kind"]
    beat_age = GaugeMetricFamily(
        "dts_meta_jobs_heartbeat_age_seconds",
        "Seconds since a running job's last heartbeat (or barrier report).",
        labels=job_labels,
    )
    beat_timeout = GaugeMetricFamily(
        "dts_meta_jobs_heartbeat_timeout_seconds",
        "A running job's heartbeat timeout: silent this long, it is marked failed.",
        labels=job_labels,
    )
    for job in view.running:
        beat_age.add_metric(
            [job.job_id, job.kind], max(0, view.now_ms - job.heartbeat_at_ms) / 1000
        )
        beat_timeout.add_metric([job.job_id, job.kind], job.heartbeat_timeout_ms / 1000)
    completed = GaugeMetricFamily(
        "dts_meta_table_completed_barrier_ms",
        "The table's latest completed barrier (epoch ms), as reported by its committer.",
        labels=["table"],
    )
    age = GaugeMetricFamily(
        "dts_meta_table_barrier_age_ms",
        "Now minus the table's latest completed barrier, in milliseconds.",
        labels=["table"],
    )
    for table, barrier in sorted(view.latest_barrier.items()):
        completed.add_metric([table], barrier)
        age.add_metric([table], max(0, view.now_ms - barrier))
    group_barrier = GaugeMetricFamily(
        "dts_meta_group_consistent_barrier_ms",
        "Greatest barrier (epoch ms) completed by every table of the group: a strong "
        "consistent read of the group reads at it.",
        labels=["group"],
    )
    lag = GaugeMetricFamily(
        "dts_meta_consistent_lag_ms",
        "How far the group's consistent barrier trails the table's latest barrier (ms).",
        labels=["table", "group"],
    )
    depth = GaugeMetricFamily(
        "dts_meta_table_lineage_depth",
        "Longest lineage path from a root table of the group (0 = root): lineage order.",
        labels=["table", "group"],
    )
    for group in view.groups:
        for table in group.tables:
            depth.add_metric([table, group.name], view.depth.get(table, 0))
        if group.consistent_barrier is None:
            continue
        group_barrier.add_metric([group.name], group.consistent_barrier)
        for table in group.tables:
            lag.add_metric(
                [table, group.name], view.latest_barrier[table] - group.consistent_barrier
            )
    return [jobs, beat_age, beat_timeout, completed, age, group_barrier, lag, depth]


class RequestMetrics:
    """ASGI middleware counting HTTP requests by route template and status code."""

    def __init__(self, app: ASGIApp, requests: Counter) -> None:
        self.app = app
        self.requests = requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # an exception escaping the app is answered 500 by the server

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            # The router records the matched route in the scope; its template keeps the
            # label set small (never the raw path with ids in it).
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            self.requests.labels(path, str(status)).inc()


def requests_counter(registry: CollectorRegistry) -> Counter:
    """``dts_meta_requests_total{route,status}`` in ``registry``."""
    return Counter(
        "dts_meta_requests",
        "HTTP requests answered, by route template and status code.",
        ["route", "status"],
        registry=registry,
    )


def meta_registry(store: Store) -> CollectorRegistry:
    """A fresh registry (no global state) holding the store's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MetaCollector(store))
    return registry
