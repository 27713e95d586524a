"""`make soak`: dts's side of the pipeline at one steady rate for an hour (issue 40).

    python -m bench.soak                                   # make soak: 60 min, a sample a minute
    python -m bench.soak --minutes 5 --sample-seconds 20   # a short look

One embedded Kafka broker (segments rolling, retention checked often: ``settings``) and
``bench.pipeline``'s dts side: two ``dts ingest``, ``dts worker``, the MetaService, two
Spark streams, and its probe's strong consistent reads, every table given the lifecycle
options. After an initial load and a warm-up the orders change at ``--rate``, with as many
deletes as inserts so that nothing has a reason to grow. A thread samples every
``--sample-seconds`` (``collect``) and runs the orphan cleanup when due; at the end the
final tables must equal the oracle, and every series is judged over the run's last two
thirds (``verdict``). Prints the table, writes ``bench/results/soak.json`` and
``soak.html``; exit status 0 when everything passed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.pipeline.__main__ import (
    PARTITIONS,
    Side,
    await_caught_up,
    log,
    settle,
    trigger_seconds,
)
from bench.pipeline.model import CUSTOMERS, TABLES
from bench.pipeline.probe import read_samples
from bench.pipeline.source import (
    STEADY_MIX,
    OrdersDatabase,
    cdc_producer,
    produce_customers,
    produce_load,
)
from bench.soak import report
from bench.soak.collect import Collector, Places, Sample, columns, consistency
from bench.soak.housekeeping import OrphanCleanup, cleanup_summary
from bench.soak.oracle import FinalCheck, await_final
from bench.soak.procs import changed_thread_names
from bench.soak.run import Measured, Sampler, measure
from bench.soak.series import metric_of
from bench.soak.settings import Lifecycle
from bench.soak.verdict import Verdict, judge
from logstore.broker import EmbeddedBroker
from logstore.topics import create_topic

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results"


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0, help="the measured run's length")
    ap.add_argument("--sample-seconds", type=float, default=60.0)
    ap.add_argument("--rate", type=int, default=2000, help="changes/s of orders")
    ap.add_argument("--initial", type=int, default=50_000,
                    help="changes loaded first (mostly inserts): the live orders held steady")  # fmt: skip
    ap.add_argument("--retention-seconds", type=int,
                    help="snapshot and log retention, segment roll and orphan cleanup scale "
                         "with it [a thirtieth of the run, 30 s .. 5 min]")  # fmt: skip
    ap.add_argument("--trigger", default="1 second", help="the Spark streams' trigger")
    ap.add_argument("--barrier-interval", default="1.0", help="dts ingest's seconds per barrier")
    ap.add_argument("--work", type=Path, help="scratch directory [a temporary one, removed]")
    ap.add_argument("--out", type=Path, default=RESULTS / "soak.json")
    ap.add_argument("--html", type=Path, default=RESULTS / "soak.html")
    ap.add_argument("--start-timeout", type=float, default=300.0)
    ap.add_argument("--settle-timeout", type=float, default=120.0,
                    help="warm-up at the rate, at most this long (not judged)")  # fmt: skip
    ap.add_argument("--final-timeout", type=float, default=180.0,
                    help="how long the final tables may take to equal the oracle")  # fmt: skip
    return ap.parse_args(argv)


def judge_all(measured: Measured, total_s: float) -> tuple[list[Verdict], tuple[float, float]]:
    """Every judged series over the last two thirds of what ran (all of it, or up to a
    Ctrl-C)."""
    until = min(total_s, measured.ended - measured.started)
    window = (until / 3, until)
    t, series = columns(measured.samples)
    verdicts = [
        judge(name, t, y, metric_of(name), *window)
        for name, y in series.items()
        if metric_of(name).judged
    ]
    return verdicts, window


def summary(
    verdicts: list[Verdict], reads: dict[str, Any], final: FinalCheck | None
) -> tuple[bool, list[str]]:
    failed = [v for v in verdicts if not v.passed]
    grew = [v.series for v in failed if v.growth is not None]
    line = f"- series: {len(verdicts) - len(failed)} of {len(verdicts)} within their noise"
    if grew:
        line += f"; grew: {', '.join(grew)}"
    if len(failed) > len(grew):
        line += f"; {len(failed) - len(grew)} with too few samples to judge"
    lines = [
        line,
        f"- strong consistent reads: {reads['disagreed']} of {reads['reads']} disagreed with "
        f"the oracle; {reads['read_errors']} failed to read"
        + "".join(f"\n  - {n} x {error}" for error, n in reads["errors"]),
    ]
    if final is None:
        lines.append("- final tables: not checked (interrupted)")
    else:
        state = "equal the oracle" if final.ok else "DIFFER: " + "; ".join(final.problems)
        lines.append(f"- final tables ({final.seconds:.0f} s after the input stopped): {state}")
    ok = not failed and reads["reads"] > 0 and reads["disagreed"] == 0
    ok = ok and final is not None and final.ok
    lines.append(f"- soak: {'PASSED' if ok else 'FAILED'}")
    return ok, lines


def thread_changes(samples: list[Sample], window: tuple[float, float]) -> str:
    """Which threads, by name, each process gained or lost over the judged window: the
    pool behind a thread series' verdict."""
    within = [s for s in samples if window[0] <= s.elapsed_s <= window[1] and s.threads]
    if len(within) < 2:
        return "- threads by name: too few samples to compare"
    changed = changed_thread_names(within[0].threads, within[-1].threads)
    if not changed:
        return "- threads by name: no process gained or lost one over the judged window"
    parts = [
        f"{proc}: " + ", ".join(f"{name} {a}->{b}" for name, (a, b) in names.items())
        for proc, names in changed.items()
    ]
    return "- threads by name, the judged window's first to last sample: " + "; ".join(parts)


def start_pipeline(
    ns: argparse.Namespace, work: Path, life: Lifecycle, stack: contextlib.ExitStack
) -> tuple[Side, EmbeddedBroker, OrdersDatabase, Any, str]:
    """The broker, the topics, the customers' snapshot, the side; then the initial load
    and the warm-up at the rate."""
    broker = EmbeddedBroker(log_path=work / "broker.log", data_dir=work / "broker",
                            properties=life.broker_properties(),
                            jvm_options=life.broker_jvm_options()).start()  # fmt: skip
    stack.callback(broker.stop)
    topic, customers_topic = "cdc.soak.orders", "cdc.soak.customers"
    create_topic(broker.bootstrap, topic, PARTITIONS, life.source_topic_config())
    create_topic(broker.bootstrap, customers_topic, 1, {})
    # room for every order id the run inserts (the arrays are indexed by id)
    seconds = ns.minutes * 60 + ns.settle_timeout + 60
    db = OrdersDatabase(capacity=ns.initial + int(ns.rate * seconds * STEADY_MIX[0] * 1.2))
    producer = cdc_producer(broker.bootstrap)
    customers = produce_customers(db, producer, customers_topic)
    extra = ["--customers-topic", customers_topic, "--customers", str(customers),
             "--tier", "file", "--barrier-interval", ns.barrier_interval,
             "--table-options", json.dumps(life.table_options()),
             "--meta-keep-barriers", str(life.keep_barriers(float(ns.barrier_interval))),
             f"--driver-java-options={life.spark_driver_jvm_options()}"]  # fmt: skip
    side = Side("dts", broker.bootstrap, topic, work / "dts", ns.trigger, extra)
    stack.callback(side.stop)
    log(f"starting the pipeline (log: {side.log_path})")
    side.await_ready(ns.start_timeout)
    initial = produce_load(db, producer, topic, ns.initial)
    log(f"ready; initial load of {initial.produced:,} changes, waiting for it downstream")
    await_caught_up(side, initial.ended, ns.start_timeout)
    db.mix = STEADY_MIX
    settled = settle(
        side, db, producer, topic, ns.rate, ns.settle_timeout, trigger_seconds(ns.trigger)
    )
    log(f"{'settled' if settled else 'NOT settled'} at {ns.rate:,}/s; "
        f"{db.live_orders():,} live orders, held steady from here")  # fmt: skip
    return side, broker, db, producer, topic


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def main(argv: list[str] | None = None) -> int:
    ns = parse(argv)
    total_s = ns.minutes * 60
    life = Lifecycle.for_run(total_s, ns.retention_seconds)
    load_before = os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        work = ns.work or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="soak-")))
        work.mkdir(parents=True, exist_ok=True)
        # every process the soak starts makes its temporary files here, so the worker's
        # Normalizer spills (tempfile.mkdtemp) where the samples look
        (work / "tmp").mkdir(exist_ok=True)
        old_tmp = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = str(work / "tmp")
        # an in-process caller (the suite's half-minute soak) gets its own back: a later
        # test's Chromium made its socket under this run's directory and failed
        stack.callback(_restore_env, "TMPDIR", old_tmp)
        print(f"soak: {ns.minutes:g} min at {ns.rate:,} changes/s, a sample every "
              f"{ns.sample_seconds:g} s; retention {life.retention_s} s\n"
              f"  results: {ns.out}\n  page:    {ns.html}\n  work:    {work}"
              f"{'' if ns.work else ' (removed at the end; --work DIR keeps it)'}\n"
              f"  logs:    {work / 'dts' / 'side.log'}, {work / 'dts' / 'logs'}/*.log, "
              f"{work / 'broker.log'}", flush=True)  # fmt: skip
        side, broker, db, producer, topic = start_pipeline(ns, work, life, stack)
        places = Places.of(work, side.work)
        roots = {("side-python" if k == "driver" else k): v for k, v in side.pids.items()}
        last_rate: list[float | None] = [None]
        collector = Collector(places, {**roots, "broker": broker.pid or 0}, time.time(),
                              lambda: last_rate[0],
                              jvms={"broker": broker.pid or 0, "spark": roots["spark"]},
                              worker_url=side.urls.get("worker"))  # fmt: skip
        cleanup = OrphanCleanup(str(places.warehouse), (*TABLES, CUSTOMERS),
                                life.orphan_every_s, life.orphan_older_than_ms)  # fmt: skip
        sampler = Sampler(collector, cleanup, ns.sample_seconds, total_s)
        measured = measure(side, db, producer, topic, ns.rate, sampler, last_rate)
        final = None
        if not measured.interrupted:
            log("input stopped; waiting for the final tables to equal the oracle")
            final = await_final(str(places.warehouse), db, ns.final_timeout)
        reads = consistency(read_samples(places.probe_samples), measured.started, measured.ended)
        verdicts, window = judge_all(measured, total_s)
        ok, lines = summary(verdicts, reads, final)
        lines.insert(-1, f"- {cleanup_summary(cleanup.runs)}")
        lines.insert(-1, thread_changes(measured.samples, window))
        ran = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(measured.started))
        args = " ".join(sys.argv[1:] if argv is None else argv)
        text = (f"Soak of {ran}, `python -m bench.soak {args}`: {ns.rate:,} changes/s, "
                f"{(measured.ended - measured.started) / 60:.1f} min, a sample every "
                f"{ns.sample_seconds:g} s, judged from minute {window[0] / 60:.1f} to "
                f"{window[1] / 60:.1f}; load average {load_before:.2f} before, "
                f"{os.getloadavg()[0]:.2f} after; {os.cpu_count()} cores\n\n"
                f"{report.verdict_table(verdicts)}\n\n" + "\n".join(lines))  # fmt: skip
        print("\n" + text, flush=True)
        out = {
            "args": vars(ns) | {"work": str(work), "out": str(ns.out), "html": str(ns.html)},
            "lifecycle": {"retention_s": life.retention_s, "table_options": life.table_options(),
                          "broker": life.broker_properties(),
                          "source_topic": life.source_topic_config(),
                          "orphan_every_s": life.orphan_every_s,
                          "orphan_older_than_ms": life.orphan_older_than_ms,
                          "meta_keep_barriers": life.keep_barriers(float(ns.barrier_interval))},
            "started": measured.started, "ended": measured.ended,
            "interrupted": measured.interrupted, "produced": measured.produced,
            "window_s": window, "passed": ok, "summary": lines, "consistency": reads,
            "final": asdict(final) if final is not None else None,
            "verdicts": [asdict(v) for v in verdicts], "orphan_cleanup": cleanup.runs,
            "samples": [asdict(s) for s in measured.samples],
        }  # fmt: skip
        ns.out.parent.mkdir(parents=True, exist_ok=True)
        ns.out.write_text(json.dumps(out, indent=1, default=str))
        report.write_html(ns.html, measured.samples, verdicts, window, text)
        print(f"\nresults: {ns.out}\nHTML: {ns.html.resolve().as_uri()}", flush=True)
        log("stopping the pipeline")
    return 130 if measured.interrupted else (0 if ok else 1)


if __name__ == "__main__":
    from bridge.commands.signals import sigterm_as_interrupt

    # SIGTERM (a supervisor, `kill`) takes Ctrl-C's way out: the side and the broker stop
    with sigterm_as_interrupt():
        sys.exit(main())
