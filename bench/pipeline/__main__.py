"""The seeds' pipeline, dts against the stack users stitch by hand (issue #25).

    python -m bench.pipeline                           # make bench-pipeline
    python -m bench.pipeline --steps 2000,4000 --step-seconds 20 --pipelines dts

One embedded Kafka broker; per pipeline its own Debezium topics: customers (the
connector's snapshot, loaded before the pipeline starts its streams) and orders (4
partitions), fed the same changes (same seed) at rising rates, one step after the other until the
pipeline stops keeping up (``report`` says how that is judged). Each pipeline runs in its
own subprocess with its own Spark (``dts_side``, ``delta_side``), one at a time, so they
never share the two cores. Prints the table and the summary, writes
``bench/results/pipeline.json``, an HTML page and, with ``--readme``, the results section
of bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.pipeline import report
from bench.pipeline.probe import cpu_seconds, read_samples
from bench.pipeline.side import READY, SAMPLES
from bench.pipeline.source import OrdersDatabase, cdc_producer, produce_customers, produce_step
from bench.results import replace_section
from logstore.broker import EmbeddedBroker
from logstore.topics import create_topic

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SIDES = {"dts": "bench.pipeline.dts_side", "delta": "bench.pipeline.delta_side"}
BEGIN, END = "<!-- bench-pipeline:begin -->", "<!-- bench-pipeline:end -->"
PARTITIONS = 4


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", default="250,500,1000,2000,4000,8000,16000,32000,64000",
                    help="input rates (changes/s), in order")  # fmt: skip
    ap.add_argument("--step-seconds", type=float, default=45.0)
    ap.add_argument("--pipelines", nargs="+", default=list(SIDES), choices=list(SIDES))
    ap.add_argument("--trigger", default="1 second", help="dts's Spark streams' trigger")
    ap.add_argument("--tier", default="file", help="the tier dts's Spark streams read")
    ap.add_argument("--barrier-interval", default="1.0", help="dts ingest's seconds per barrier")
    ap.add_argument("--delta-trigger", default="1 second",
                    help="the stitched pipeline's streams' trigger")  # fmt: skip
    ap.add_argument("--work", type=Path, help="scratch directory [a temporary one]")
    ap.add_argument("--out", type=Path, default=HERE.parent / "results" / "pipeline.json")
    ap.add_argument("--html", type=Path, default=HERE.parent / "results" / "pipeline.html")
    ap.add_argument("--readme", type=Path, help="rewrite this README's results section")
    ap.add_argument("--initial", type=int, default=20_000, help="changes loaded before the steps")
    ap.add_argument("--start-timeout", type=float, default=300.0)
    ap.add_argument("--settle-timeout", type=float, default=180.0,
                    help="warm-up at the first rate, at most this long")  # fmt: skip
    return ap.parse_args(argv)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Side:
    """A pipeline's subprocess: started, awaited, stopped by PID."""

    def __init__(
        self, name: str, bootstrap: str, topic: str, work: Path, trigger: str, extra: list[str]
    ) -> None:
        self.name = name
        self.work = work
        work.mkdir(parents=True)
        self.log_path = work / "side.log"
        cmd = [sys.executable, "-m", SIDES[name], "--bootstrap", bootstrap, "--topic", topic,
               "--work", str(work), "--trigger", trigger, *extra]  # fmt: skip
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        self.pids: dict[str, int] = {}

    def check(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise SystemExit(f"{self.name} side exited ({self.proc.returncode}); "
                             f"{self.log_path} ends with:\n{tail}")  # fmt: skip

    def await_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not (self.work / READY).is_file():
            self.check()
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"{self.name} side not ready in {timeout_s:.0f} s: {self.log_path}"
                )
            time.sleep(0.5)
        self.pids = json.loads((self.work / READY).read_text())["pids"]

    def samples(self) -> list[dict[str, Any]]:
        return read_samples(self.work / SAMPLES)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def await_caught_up(side: Side, since: float, timeout_s: float) -> None:
    """Until a read after ``since`` finds all three tables holding rows."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        side.check()
        if any(s["t"] > since and "wrong" in s for s in side.samples()):
            return
        time.sleep(1.0)
    raise SystemExit(
        f"{side.name}: the initial load did not reach every table in {timeout_s:.0f} s"
    )


SETTLED_S = 5.0


def settle(
    side: Side, db: OrdersDatabase, producer: Any, topic: str, rate: int, timeout_s: float
) -> bool:
    """Warm-up, not measured: produce at the first step's rate until every table is within
    SETTLED_S of the source (the initial load and Spark's first batches are behind)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        step = produce_step(db, producer, topic, rate, 5.0)
        side.check()
        recent = [s for s in side.samples() if s["t"] >= step.started and "latest" in s]
        if recent and all(
            s["t"] - v / 1000 <= SETTLED_S for s in recent[-2:] for v in s["latest"].values()
        ):
            return True
    return False


def run_pipeline(
    name: str, broker: EmbeddedBroker, ns: argparse.Namespace, work: Path
) -> tuple[list[report.StepFigures], list[dict[str, Any]], float]:
    topic, customers_topic = f"cdc.{name}.orders", f"cdc.{name}.customers"
    create_topic(broker.bootstrap, topic, PARTITIONS, {})
    create_topic(broker.bootstrap, customers_topic, 1, {})
    db = OrdersDatabase()
    producer = cdc_producer(broker.bootstrap)
    # the dimension is in its topic before the pipeline starts: a side loads it before it
    # starts its streams, as a user lets the connector's snapshot land before going live
    customers = produce_customers(db, producer, customers_topic)
    trigger = ns.delta_trigger if name == "delta" else ns.trigger
    extra = ["--customers-topic", customers_topic, "--customers", str(customers)]
    if name == "dts":
        extra += ["--tier", ns.tier, "--barrier-interval", ns.barrier_interval]
    side = Side(name, broker.bootstrap, topic, work / name, trigger, extra)
    started = time.time()
    log(f"{name}: starting its pipeline (log: {side.log_path})")
    steps: list[report.StepFigures] = []
    try:
        side.await_ready(ns.start_timeout)
        initial = produce_step(db, producer, topic, ns.initial, 1.0)
        log(
            f"{name}: ready; initial load of {initial.produced:,} changes, waiting for it downstream"
        )
        await_caught_up(side, initial.ended, ns.start_timeout)
        first = int(ns.steps.split(",")[0])
        settled = settle(side, db, producer, topic, first, ns.settle_timeout)
        log(f"{name}: {'settled' if settled else 'NOT settled'} at {first:,}/s (every table "
            f"within {SETTLED_S:g} s of the source, or {ns.settle_timeout:.0f} s passed)")  # fmt: skip
        roots = {**side.pids, "broker": broker.pid or 0, "generator": os.getpid()}
        for rate in [int(r) for r in ns.steps.split(",")]:
            cpu0, t0 = cpu_seconds(roots), time.monotonic()
            step = produce_step(db, producer, topic, rate, ns.step_seconds)
            side.check()
            cpu1, dt = cpu_seconds(roots), time.monotonic() - t0
            cpu = {k: (cpu1[k] - cpu0.get(k, 0.0)) / dt for k in cpu1}
            fig = report.step_figures(
                side.samples(), rate, step.achieved, step.started, step.ended, cpu
            )
            steps.append(fig)
            p99 = max((v for v in fig.freshness_p99.values() if v is not None), default=None)
            log(f"{name} {rate:,}/s: {'kept up' if fig.kept_up else 'fell behind: ' + fig.why}; "
                f"freshness p99 (slowest table) {report._f(p99)} s; "
                f"{fig.inconsistent} inconsistent of {fig.reads} reads")  # fmt: skip
            if not fig.kept_up:
                break
    finally:
        log(f"{name}: stopping its pipeline")
        side.stop()
    return steps, side.samples(), started


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ns = parse(argv)
    if "delta" in ns.pipelines:
        from bench.spark_peers.__main__ import fetch_jars

        fetch_jars("delta")
    load_before = os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        work = ns.work or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-pipeline-"))
        )
        work.mkdir(parents=True, exist_ok=True)
        log(f"work directory {work}; starting the Kafka broker")
        broker = EmbeddedBroker(log_path=work / "broker.log").start()
        stack.callback(broker.stop)
        runs, samples, starts = {}, {}, {}
        for name in ns.pipelines:
            runs[name], samples[name], starts[name] = run_pipeline(name, broker, ns, work)
    out = report.summary(runs, samples)
    out.update(load_before=load_before, load_after=os.getloadavg()[0], trigger=ns.trigger,
               delta_trigger=ns.delta_trigger,
               step_seconds=ns.step_seconds, cores=os.cpu_count())  # fmt: skip
    table = report.format_table(runs)
    ran = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    args = " ".join(sys.argv[1:] if argv is None else argv)
    text = (f"Last run {ran}, `python -m bench.pipeline {args}`:\n\n"
            f"{table}\n\n{report.format_summary(out)}\n\nload average {load_before:.2f} before, "
            f"{out['load_after']:.2f} after; {os.cpu_count()} cores; trigger dts {ns.trigger}, "
            f"stitched {ns.delta_trigger}; "
            f"{ns.step_seconds:g} s per step")  # fmt: skip
    print("\n" + text, flush=True)
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(json.dumps(out, indent=2))
    report.write_html(ns.html, samples, runs, starts, text)
    print(f"\nresults: {ns.out}\nHTML: {ns.html.resolve().as_uri()}", flush=True)
    if ns.readme is not None:
        replace_section(ns.readme, BEGIN, END, text)
    return out


if __name__ == "__main__":
    from bridge.commands.signals import sigterm_as_interrupt

    # SIGTERM (a supervisor, `kill`) takes Ctrl-C's way out: the sides and the broker stop
    with sigterm_as_interrupt():
        main()
