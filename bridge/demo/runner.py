"""The demo from start to finish: start the parts, stream, read consistently, time travel, CTAS.

``run_demo(options, console)`` does every step in order, printing progress, and stops
everything it started (reverse order, via an ``ExitStack``) when it ends, fails or is
interrupted. ``--keep-running`` leaves the pipeline up after the report until Ctrl-C.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from bridge.demo import report
from bridge.demo.checks import (
    check_read,
    run_ctas,
    time_travel,
)
from bridge.demo.errors import DemoError, ReportDataMissing
from bridge.demo.generator import CdcGenerator, GeneratorThread, RoundSizes
from bridge.demo.html_report import write_html_report
from bridge.demo.metrics_history import MetricsSampler
from bridge.demo.model import (
    CUSTOMERS,
    DB,
    DERIVED,
    ENRICHED,
    ORDERS,
    SOURCES,
    TOTALS,
    create_tables,
)
from bridge.demo.outcome import DemoRun
from bridge.demo.pipeline import (
    WORKER_GROUP,
    ServiceProcess,
    SparkStarter,
    StreamingJobs,
    await_meta,
    http_ok,
    meta_has_barrier,
    start_meta,
    start_worker,
    wait_until,
)
from bridge.demo.prometheus_history import PrometheusRecorder, best_history
from bridge.demo.rundir import DEFAULT_ROOT, new_run_dir
from bridge.demo.secure import SECURED, DemoSecurity, Secured, environment_set
from bridge.errors import PrometheusUnavailable
from bridge.tables import log_spec_for, open_log_writer
from filestore import Catalog
from logstore.broker import EmbeddedBroker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class DemoOptions:
    warehouse: str | None = None
    keep_running: bool = False
    stream_seconds: float = 20.0
    round_interval_s: float = 1.0
    catch_up_timeout_s: float = 60.0
    #: runs are kept in ``<run_root>/run-<time>/`` (``dts demo --clean`` removes them)
    run_root: str = DEFAULT_ROOT
    #: SASL_SSL with ACLs on the broker, TLS and a token on the MetaService (``secure``)
    secure: bool = False


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """While cleaning up, a second Ctrl-C (or a SIGTERM) must not leave half-stopped
    processes behind: the stop steps are bounded in time instead."""
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


class DemoRunner:
    def __init__(self, options: DemoOptions, console: Console) -> None:
        self.options = options
        self.console = console
        self.run = DemoRun()
        self.run_dir = Path()
        self.started = time.monotonic()
        self.started_unix = time.time()
        self.prometheus: PrometheusRecorder | None = None
        self.security: DemoSecurity | None = None
        self.secured: Secured | None = None
        #: the CA the MetaService is verified with (the secured demo's), for the scrapers
        self.meta_ca: str | None = None
        self._phase_started = self.started

    # ---- progress -------------------------------------------------------------------------

    def step(self, message: str) -> None:
        # soft wrap: a long path stays on one line (copyable) in a pipe as on a terminal
        self.console.print(
            f"[dim]{time.monotonic() - self.started:6.1f}s[/] {message}", soft_wrap=True
        )

    def phase_done(self, name: str) -> None:
        now = time.monotonic()
        self.run.timings.append((name, now - self._phase_started))
        self._phase_started = now

    def _on_stop(self, stack: ExitStack, name: str, fn: Any, *args: Any) -> None:
        """Register a stop step: timed, and never raising (the next steps must run)."""

        def stop() -> None:
            started = time.monotonic()
            try:
                fn(*args)
            except Exception as e:  # reported, not raised: cleanup goes on
                self.step(f"[yellow]stopping {name} failed: {e}[/]")
                return
            self.step(f"stopped {name} ({time.monotonic() - started:.1f} s)")

        stack.callback(stop)

    # ---- the whole run --------------------------------------------------------------------

    def execute(self) -> DemoRun:
        stack = ExitStack()
        old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            self._execute(stack)
        except KeyboardInterrupt:
            self.run.interrupted = True
            self.console.print("\n[yellow]interrupted: stopping everything...[/]")
        finally:
            with signals_ignored():
                self.step(
                    "stopping the streaming jobs, Spark, the worker, the MetaService, the broker"
                )
                stack.close()
            signal.signal(signal.SIGTERM, old_term)
        self.run.timings.append(("stop everything", time.monotonic() - self._phase_started))
        return self.run

    def _execute(self, stack: ExitStack) -> None:
        run_dir = self.run_dir = new_run_dir(Path(self.options.run_root))
        self.run.run_dir = str(run_dir)
        warehouse = self._warehouse(run_dir)
        self.run.warehouse = warehouse
        logs = run_dir / "logs"
        logs.mkdir()

        catalog, bootstrap, meta, worker = self._start_services(stack, warehouse, logs)
        # the MetaService's freshness and consistent-lag gauges, once a second, for the report
        sampler = MetricsSampler(
            f"{meta.address}/metrics", started=self.started, ca_file=self.meta_ca
        ).start()
        stack.callback(sampler.stop)
        self._start_prometheus(stack, meta.address, run_dir / "prometheus")
        starter = SparkStarter(run_dir / "spark", warehouse)  # the JVM starts meanwhile
        self._on_stop(stack, "Spark", starter.stop)
        self.step("starting Spark (local[2], in the background) with the dts data source")
        self._print_addresses(meta, worker, warehouse, logs)
        generator, gen_thread = self._start_generator(stack, catalog, bootstrap)
        spark = self._await_spark(starter, worker, gen_thread)
        jobs = self._stream(stack, spark, catalog, warehouse, meta, worker, gen_thread)
        self.run.weak = check_read(None, catalog, warehouse, meta.address, "weak")
        self.step(report.read_line(self.run.weak))
        self._finish_stream(generator, gen_thread, jobs, worker)

        self.step("strong consistent read (Spark, at one barrier, through the MetaService)")
        self.run.strong = check_read(spark, catalog, warehouse, meta.address, "strong")
        self.step(report.read_line(self.run.strong))
        self.phase_done("consistent reads")
        self.step(f"time travel: {CUSTOMERS} and {ORDERS} at the first barrier vs now")
        self.run.travel = time_travel(spark, catalog, warehouse, generator.barriers["orders"][0],
                                      generator.barriers["customers"][0])  # fmt: skip
        self.phase_done("time travel")
        self.step("atomic CREATE TABLE AS SELECT (and one that fails: nothing becomes visible)")
        self.run.ctas = run_ctas(spark, catalog, warehouse, self.run.strong)
        self.phase_done("CTAS")
        self.run.batches = jobs.batches()
        self.run.worker_records = report.worker_records(worker.address)
        report.print_report(self.console, self.run, catalog)
        self._write_html_report(sampler)
        if self.options.keep_running:
            self._keep_running(stack, generator, jobs, worker, meta, warehouse)

    def _start_prometheus(self, stack: ExitStack, meta_url: str, work_dir: Path) -> None:
        """A real Prometheus scraping the MetaService, when one is installed."""
        try:
            self.prometheus = PrometheusRecorder(meta_url, work_dir, ca_file=self.meta_ca).start()
        except PrometheusUnavailable as e:
            self.step(f"no Prometheus ({e}): the demo samples the MetaService's /metrics itself")
            return
        self._on_stop(stack, "Prometheus", self.prometheus.stop)
        self.run.addresses["Prometheus"] = self.prometheus.url
        self.step(f"Prometheus {self.prometheus.url} scrapes the MetaService every second")

    def _write_html_report(self, sampler: MetricsSampler) -> None:
        history, source, why = best_history(self.prometheus, sampler.stop(), self.started_unix)
        if why is not None:
            self.step(f"[yellow]report from the demo's own samples: {why}[/]")
        path = self.run_dir / "report.html"
        summary = [f"{name}: {seconds:.1f} s" for name, seconds in self.run.timings]
        if self.run.strong is not None:
            summary.insert(0, report.read_line(self.run.strong))
        try:
            write_html_report(history, path, source=source, summary=summary)
        except ReportDataMissing as e:
            self.step(f"[yellow]no HTML report: {e}[/]")
            return
        self.run.html_report = str(path)
        self.step(f"HTML report (freshness, consistent-version lag): {path.as_uri()}")

    # ---- steps ----------------------------------------------------------------------------

    def _warehouse(self, run_dir: Path) -> str:
        if self.options.warehouse is None:
            return str(run_dir / "warehouse")
        path = Path(self.options.warehouse).resolve()
        path.mkdir(parents=True, exist_ok=True)
        if DB in Catalog(str(path)).list_databases():
            raise DemoError(
                f"{path} already holds a '{DB}' database from an earlier demo; "
                "give --warehouse an empty (or new) directory"
            )
        return str(path)

    def _start_services(
        self, stack: ExitStack, warehouse: str, logs: Path
    ) -> tuple[Any, str, ServiceProcess, ServiceProcess]:
        broker = self._start_broker(stack, logs)
        self.run.addresses["broker"] = broker.bootstrap
        catalog = Catalog(warehouse)
        create_tables(catalog)
        self.step(f"created {', '.join(SOURCES + DERIVED)} in {warehouse}")
        tls_args = self._secure(stack, broker, catalog) if self.security is not None else None
        self.step("starting the MetaService (dts meta serve) and the worker (dts worker)")
        meta = start_meta(warehouse, logs, tls_args)
        self._on_stop(stack, "MetaService", meta.stop)
        # the worker reports its barriers there (and creates the sources' topics, partitions =
        # buckets, before it subscribes)
        meta.address = await_meta(meta)
        worker = start_worker(warehouse, broker.bootstrap, meta.address, logs)
        self._on_stop(stack, "worker", worker.stop)
        return catalog, broker.bootstrap, meta, worker

    def _start_broker(self, stack: ExitStack, logs: Path) -> EmbeddedBroker:
        if self.options.secure:
            self.step(f"starting the embedded Apache Kafka broker (KRaft, on 127.0.0.1) {SECURED}")
            self.security = DemoSecurity.generated(self.run_dir / "secure")
            broker = self.security.start_broker(logs / "broker.log")
        else:
            self.step("starting the embedded Apache Kafka broker (KRaft, on 127.0.0.1)")
            broker = EmbeddedBroker(log_path=logs / "broker.log").start()
        self._on_stop(stack, "broker", broker.stop)
        return broker

    def _secure(self, stack: ExitStack, broker: EmbeddedBroker, catalog: Catalog) -> list[str]:
        """The demo's principal gets its ACLs, and the client configuration goes into the
        environment every later part starts with; returns the MetaService's TLS options."""
        assert self.security is not None
        specs = [log_spec_for(catalog.get_table(name)) for name in SOURCES]
        self.secured = secured = self.security.secure(broker, specs, WORKER_GROUP)
        stack.enter_context(environment_set(secured.environment))
        self.meta_ca = str(secured.ca)
        self.run.addresses.update(secured.addresses)
        self.step(secured.message)
        return secured.meta_tls_args

    def _print_addresses(
        self, meta: ServiceProcess, worker: ServiceProcess, warehouse: str, logs: Path
    ) -> None:
        self.run.addresses.update(
            {
                "worker /metrics": f"{worker.address}/metrics",
                "worker /status": f"{worker.address}/status",
                "MetaService": meta.address,
                "MetaService /metrics": f"{meta.address}/metrics",
            }
        )
        report.print_addresses(self.console, self.run.addresses, warehouse, logs)
        self.phase_done("start broker, MetaService, worker")

    def _start_generator(
        self, stack: ExitStack, catalog: Catalog, bootstrap: str
    ) -> tuple[CdcGenerator, GeneratorThread]:
        writers = {}
        for short, name in (("orders", ORDERS), ("customers", CUSTOMERS)):
            writers[short] = open_log_writer(
                catalog.get_table(name), bootstrap, barrier_interval_s=None
            )
            self._on_stop(stack, f"{short} log writer", _close_writer, writers, short)
        generator = CdcGenerator(writers, sizes=RoundSizes())
        self.run.generator = generator
        generator.snapshot_initial()
        gen_thread = GeneratorThread(generator, self.options.round_interval_s).start()
        self._on_stop(stack, "CDC generator", gen_thread.stop)
        self.step(
            "CDC generator running: each round inserts, updates and deletes orders, "
            f"updates customers, then closes a barrier (every {self.options.round_interval_s:g} s)"
        )
        return generator, gen_thread

    def _await_spark(
        self, starter: SparkStarter, worker: ServiceProcess, gen_thread: GeneratorThread
    ) -> Any:
        spark = starter.session()
        self.step("Spark is up")
        self.phase_done("start Spark (with the generator running)")
        self.step("waiting for the worker's first snapshot of the sources")

        def first_snapshots() -> bool:
            return all(self._latest_barrier_of(n) is not None for n in SOURCES)

        def alive() -> None:
            worker.check()
            gen_thread.check()

        if not wait_until(first_snapshots, 120, "the worker's first snapshots", alive):
            raise DemoError(
                f"the worker committed no snapshot within 120 s; its log: {worker.log_path}\n"
                f"{worker.tail()}"
            )
        if not http_ok(f"{worker.address}/status"):
            self.step(f"[yellow]note: {worker.address}/status does not answer yet[/]")
        self.phase_done("worker's first snapshot")
        return spark

    def _latest_barrier_of(self, name: str) -> int | None:
        snap = Catalog(self.run.warehouse).get_table(name).latest_snapshot()
        return snap.barrier if snap is not None else None

    def _stream(
        self,
        stack: ExitStack,
        spark: SparkSession,
        catalog: Catalog,
        warehouse: str,
        meta: ServiceProcess,
        worker: ServiceProcess,
        gen_thread: GeneratorThread,
    ) -> StreamingJobs:
        ck = self.run_dir / "checkpoints"
        jobs = StreamingJobs(spark, warehouse, meta.address, ck).start()
        self._on_stop(stack, "Spark streaming jobs", jobs.stop)
        self.step(
            f"Spark streaming jobs running: {ORDERS} -> {ENRICHED} (filter + size band), "
            f"{ORDERS} -> {TOTALS} (per-customer totals)"
        )

        def alive() -> None:
            worker.check()
            gen_thread.check()
            jobs.check()

        def committed(n: int) -> Callable[[], bool]:
            return lambda: all(jobs.batches().get(t, 0) >= n for t in DERIVED)

        # the --stream-seconds start once both jobs commit: their first micro-batch waits
        # for Spark to plan and run the first read, which took longer than the whole
        # announced time on a busy machine
        started = time.monotonic()
        self._follow(committed(1), started + 120, catalog, gen_thread, alive)
        self.step(
            f"both jobs committed their first micro-batch after {time.monotonic() - started:.0f} s;"
            f" streaming for {self.options.stream_seconds:g} s"
        )
        deadline = time.monotonic() + self.options.stream_seconds
        self.phase_done("Spark jobs' first micro-batch")
        self._follow(
            lambda: time.monotonic() >= deadline, deadline + 60, catalog, gen_thread, alive
        )
        # and each has followed live changes (a second micro-batch) before the reads
        self._follow(committed(2), time.monotonic() + 60, catalog, gen_thread, alive)
        self.phase_done("streaming (generator, worker, Spark jobs)")
        return jobs

    def _follow(
        self,
        done: Callable[[], bool],
        limit: float,
        catalog: Catalog,
        gen_thread: GeneratorThread,
        alive: Callable[[], None],
    ) -> None:
        """Poll ``done`` until ``limit`` (monotonic), printing progress every 5 s."""
        last = time.monotonic()
        while not done():
            alive()
            now = time.monotonic()
            if now >= limit:
                raise DemoError("the streaming jobs made no progress within the time limit")
            if now - last >= 5:
                self.step(report.progress_line(catalog, gen_thread.generator))
                last = now
            time.sleep(0.5)

    def _finish_stream(
        self,
        generator: CdcGenerator,
        gen_thread: GeneratorThread,
        jobs: StreamingJobs,
        worker: ServiceProcess,
    ) -> None:
        gen_thread.stop()
        final = generator.last_barrier("orders")
        assert final is not None
        self.step(f"generator stopped after {generator.rounds} rounds; last orders barrier {final}")

        def reached(table: str) -> bool:
            return (self._latest_barrier_of(table) or 0) >= final

        def alive() -> None:
            worker.check()
            jobs.check()

        timeout = self.options.catch_up_timeout_s
        if not wait_until(lambda: reached(ORDERS) and reached(CUSTOMERS), timeout, "worker", alive):
            self.step("[yellow]the worker has not committed the last barrier yet; going on[/]")
        # the worker reports each committed barrier to the MetaService from a background
        # thread: let the MetaService see the sources' last ones before the consistent reads
        url = self.run.addresses["MetaService"]
        for source in SOURCES:
            last = self._latest_barrier_of(source)
            if last is not None:
                reported = functools.partial(meta_has_barrier, url, source, last)
                wait_until(reported, 10, "MetaService", alive)
        if wait_until(lambda: all(reached(t) for t in DERIVED), timeout, "Spark jobs", alive):
            self.step(f"both derived tables caught up with barrier {final}")
        else:
            self.step(
                "[yellow]the derived tables did not catch up in time; reading what they share[/]"
            )
        self.phase_done("catch up")

    def _keep_running(
        self,
        stack: ExitStack,
        generator: CdcGenerator,
        jobs: StreamingJobs,
        worker: ServiceProcess,
        meta: ServiceProcess,
        warehouse: str,
    ) -> None:
        gen_thread = GeneratorThread(generator, max(2.0, self.options.round_interval_s)).start()
        self._on_stop(stack, "CDC generator", gen_thread.stop)
        report.print_exploration(
            self.console,
            self.run.addresses,
            warehouse,
            self.run_dir / "logs",
            self.secured.exports if self.secured is not None else None,
        )
        # Ctrl-C (or SIGTERM) only sets a flag here: raised inside a py4j call (jobs.check
        # asks Spark), the KeyboardInterrupt came out as py4j's own error and the demo ended
        # with a traceback instead of its orderly stop
        stop = threading.Event()
        signals = (signal.SIGINT, signal.SIGTERM)
        old = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in signals}
        try:
            while not stop.wait(1.0):
                for part in (worker, meta, gen_thread, jobs):
                    part.check()
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
        self.console.print("\n[green]Ctrl-C: stopping the demo[/]")


def _close_writer(writers: dict[str, Any], short: str) -> None:
    """Close and drop the writer: its Kafka producer is destroyed before the broker stops
    (a live one keeps logging reconnect errors)."""
    writer = writers.pop(short, None)
    if writer is not None:
        writer.close(final_barrier=False)


def run_demo(options: DemoOptions, console: Console) -> DemoRun:
    """Run the demo; returns what happened (``.interrupted`` after Ctrl-C)."""
    return DemoRunner(options, console).execute()
