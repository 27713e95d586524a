"""Faust app factory for `dts worker` (no app object exists at import time)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from collections.abc import Set
from typing import Any

import faust
from faust.types import TP

from bridge.meta.client import MetaClient
from bridge.worker.config import WorkerConfig
from bridge.worker.dataplane import DataPlane
from bridge.worker.fetch import LogFetcher
from bridge.worker.log_repeats import limit_repeats
from bridge.worker.meta_link import MetaLink
from bridge.worker.metrics import WorkerMetrics
from bridge.worker.ownership import OwnershipQueue
from bridge.worker.reachability import LogReachability
from bridge.worker.runtime import WorkerRuntime
from bridge.worker.state.status import WorkerStatus
from bridge.worker.table_worker import BarrierListener, TableWorker
from bridge.worker.tiers import (
    TopicGate,
    build_table_worker,
    build_table_workers,
    discover_tables,
)
from bridge.worker.transport import DtsTransport
from bridge.worker.web import attach_views
from filestore import Catalog
from logstore.client_config import client_settings, faust_settings

log = logging.getLogger(__name__)


class WorkerApp(faust.App):
    """A Faust app whose consumer resumes partitions where the FileStore says."""

    runtime: WorkerRuntime
    metrics: WorkerMetrics
    status: WorkerStatus

    def _new_transport(self) -> Any:
        return DtsTransport(self.conf.broker_consumer, self)

    ownership: OwnershipQueue

    def resume_hook(self, assigned: Set[TP], generation: int) -> None:
        self.ownership.assigned(assigned, generation)


def create_app(config: WorkerConfig, tables: list[TableWorker] | None = None) -> WorkerApp:
    """Build the worker app. ``tables`` defaults to the catalog's tables (or
    ``config.tables``) bound to the real FileStore and LogStore."""
    limit_repeats()  # aiokafka logs each reconnect of an outage: one line a minute
    metrics = WorkerMetrics(job=config.group)
    status = WorkerStatus(job=config.group)
    meta = _meta_link(config, metrics)
    on_barrier = meta.report if meta is not None else None
    gate = TopicGate(config.bootstrap, metrics)
    if tables is None:
        tables = build_table_workers(config, metrics, status, on_barrier, gate)
    for t in tables:
        status.tables[t.name] = t.status
        if meta is not None:
            t.on_barrier = on_barrier
            meta.add_table(t.name)
    fetcher = LogFetcher(
        config.bootstrap,
        batch_size=config.batch_size,
        queue_batches=config.fetch_queue_batches,
        prefetch_kbytes=config.prefetch_kbytes,
        client_config=client_settings(),
        link=LogReachability(config.bootstrap, metrics, status.log),
    )
    runtime = WorkerRuntime(tables, metrics, status, fetcher, config.stall_after_s)

    app = WorkerApp(
        config.group,
        broker=f"kafka://{config.bootstrap}",
        datadir=config.datadir or tempfile.mkdtemp(prefix="dts-worker-"),
        web_enabled=config.web_enabled,
        web_bind=config.web_host,
        web_host=config.web_host,
        web_port=config.web_port,
        topic_disable_leader=True,
        topic_allow_declare=False,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=config.session_timeout_s,
        broker_heartbeat_interval=config.heartbeat_interval_s,
        broker_rebalance_timeout=config.rebalance_timeout_s,
        broker_request_timeout=config.request_timeout_s,
        # Faust's consumer only coordinates: it pauses every partition it is assigned,
        # so at most one small fetch per partition happens before the pause
        consumer_max_fetch_size=1024,
        **faust_settings(),  # SASL/SSL of a secured cluster (DTS_KAFKA_CONFIG)
    )
    app.runtime, app.metrics, app.status = runtime, metrics, status
    app.ownership = ownership = OwnershipQueue(runtime)
    runtime.superseded = ownership.superseded
    # Faust batches topic changes for 45 s before resubscribing; new tables should not wait
    app.topics._resubscribe_sleep_lock_seconds = config.resubscribe_delay_s  # type: ignore[attr-defined]

    commit_wanted = asyncio.Event()

    async def commit_now() -> None:
        await asyncio.to_thread(runtime.commit_ready)

    for topic in runtime.by_topic:
        subscribe(app, topic)

    def on_prepared() -> None:
        app.loop.call_soon_threadsafe(commit_wanted.set)

    def on_fatal(exc: BaseException) -> None:
        asyncio.run_coroutine_threadsafe(app.crash(exc), app.loop)

    plane = DataPlane(runtime, fetcher, on_prepared, on_fatal)

    async def start_plane() -> None:
        ownership.start()
        plane.start()

    app.task(start_plane)

    if config.table_scan_interval_s > 0 and not config.tables:
        scanner = TableScanner(config, runtime, on_barrier, gate)

        async def scan_tick() -> None:
            for tw in await asyncio.to_thread(scanner.scan):
                if meta is not None:
                    meta.add_table(tw.name)
                runtime.add(tw)
                # the conductor resubscribes and the group rebalances (after
                # resubscribe_delay_s); the new assignment positions the fetcher
                subscribe(app, tw.topic)
                log.info("table %s: found by the catalog scan, consuming %s", tw.name, tw.topic)

        app.timer(config.table_scan_interval_s, name="dts-table-scan")(scan_tick)

    if meta is not None:

        async def start_meta() -> None:
            meta.start()

        app.task(start_meta)

    async def on_revoked(sender: Any, *args: Any, signal: Any = None, **kwargs: Any) -> None:
        revoked: Set[TP] = args[0] if args else kwargs.get("revoked", set())
        ownership.revoked(revoked)

    # mode's stubs want a positional-only sender; Faust calls (sender, revoked, signal=...)
    app.on_partitions_revoked.connect(on_revoked)  # type: ignore[arg-type]

    async def commit_loop() -> None:
        # a loop, not a Faust timer: a commit may well take longer than the poll interval;
        # woken at once when this worker prepared a barrier, polled for other workers'
        while not app.should_stop:
            await commit_now()
            # other workers' prepared records are only seen by polling: poll fast while a
            # barrier waits for them (barriers commit in order, so each wait adds up)
            poll = (
                config.commit_fast_poll_s if runtime.committers_waiting() else config.commit_poll_s
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(commit_wanted.wait(), poll)
            commit_wanted.clear()

    async def status_tick() -> None:
        _refresh_lag(fetcher, runtime)

    app.task(commit_loop)
    app.timer(config.status_poll_s, name="dts-status")(status_tick)

    async def on_shutdown(sender: Any, *args: Any, signal: Any = None, **kwargs: Any) -> None:
        await asyncio.to_thread(ownership.stop)
        await asyncio.to_thread(plane.stop)
        await asyncio.to_thread(runtime.close)
        if meta is not None:
            await asyncio.to_thread(meta.close)

    app.on_before_shutdown.connect(on_shutdown)  # type: ignore[arg-type]
    attach_views(app, metrics, status)
    return app


def _meta_link(config: WorkerConfig, metrics: WorkerMetrics) -> MetaLink | None:
    if not config.meta_url:
        return None
    return MetaLink(
        MetaClient(config.meta_url, timeout_s=5.0),
        config.group,
        metrics,
        heartbeat_interval_s=config.meta_heartbeat_interval_s,
        heartbeat_timeout_ms=config.meta_heartbeat_timeout_ms,
        description=f"dts worker group {config.group}",
    )


class TableScanner:
    """Finds tables created after the worker started; creates their topic if absent
    (``TopicGate``: a topic a subscription auto-created would have the wrong partition
    count) and retries tables refused earlier."""

    def __init__(
        self,
        config: WorkerConfig,
        runtime: WorkerRuntime,
        on_barrier: BarrierListener | None,
        gate: TopicGate,
    ) -> None:
        self.config = config
        self.runtime = runtime
        self.on_barrier = on_barrier
        self.gate = gate

    def scan(self) -> list[TableWorker]:
        try:
            found = discover_tables(
                Catalog(self.config.warehouse), self.config, self.runtime.table_names
            )
            return [
                build_table_worker(
                    t, self.config, self.runtime.metrics, self.runtime.status, self.on_barrier
                )
                for t in self.gate.admit(found)
            ]
        except Exception as exc:  # a half-created table, a broker hiccup: next scan retries
            log.warning("catalog scan failed, retrying: %r", exc)
            return []


def subscribe(app: faust.App, topic: str) -> None:
    """Add ``topic`` to the group's subscription. No agent reads it: records are
    fetched in bulk (``bridge.worker.fetch``), Faust only assigns its partitions."""
    app.topics.add(app.topic(topic, key_type=bytes, value_type=bytes, allow_empty=True))


def _refresh_lag(fetcher: LogFetcher, runtime: WorkerRuntime) -> None:
    """High watermarks -> lag gauges (records and ms) per owned bucket."""
    job = runtime.metrics.job
    for topic, slot in runtime.by_topic.items():
        tw = slot.worker
        for b, writer in list(tw.buckets.items()):
            hw = fetcher.highwater(topic, b)
            if hw is None:
                continue  # not fetched yet
            st = writer.status
            st.high_watermark = hw
            runtime.metrics.lag_records.labels(tw.name, str(b), job).set(st.lag_records or 0)
            runtime.metrics.lag_ms.labels(tw.name, str(b), job).set(st.lag_ms())
