"""The seeds' pipeline, dts against the stack users stitch by hand, built as an expert
builds it (issues #25, #42).

    python -m bench.pipeline                           # make bench-pipeline
    python -m bench.pipeline --pipelines dts --first-rate 4000 --step-seconds 30

One embedded Kafka broker; per pipeline its own Debezium topics: customers (the
connector's snapshot, loaded before the pipeline starts its streams) and orders (4
partitions), fed the same changes (same seed). Each pipeline's highest sustained rate is
searched for (``search``: doubling, then bisection to ``--precision``), every step
preceded by a warm-up that is not measured; then both are measured at a shared rate (half
dts's highest). Each stitched stack (Delta, and Paimon as a second variant) is swept over
the triggers of ``--delta-triggers`` / ``--paimon-triggers``: each trigger searched by
doubling, then the best one restarted and bisected to the precision from where its
doubling left it, and reported.
Each pipeline runs in its own subprocess with its own Spark (``dts_side``, ``delta_side``,
``paimon_side`` with ``paimon_job`` on Paimon's Spark 3.5) and its reader in another
(``dts_probe``, ``delta_probe``, ``paimon_probe``), one pipeline at a time, so they never
share the two cores. Prints the table and the
summary, writes ``bench/results/pipeline.json``, an HTML page and, with ``--readme``, the
results section of bench/README.md.
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
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.pipeline import profile, report
from bench.pipeline.probe import cpu_seconds, read_samples
from bench.pipeline.search import Bounds, best_setting, coarse, first_rate, search
from bench.pipeline.side import READY, SAMPLES
from bench.pipeline.source import (
    STEADY_MIX,
    OrdersDatabase,
    StepResult,
    cdc_producer,
    produce_customers,
    produce_load,
    produce_step,
)
from bench.results import replace_section
from logstore.broker import EmbeddedBroker
from logstore.topics import create_topic

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SIDES = {
    "dts": "bench.pipeline.dts_side",
    "delta": "bench.pipeline.delta_side",
    "paimon": "bench.pipeline.paimon_side",
}
#: the stitched stacks, each searched at every trigger of its own list
STITCHED = ("delta", "paimon")
BEGIN, END = "<!-- bench-pipeline:begin -->", "<!-- bench-pipeline:end -->"
PARTITIONS = 4
CAPACITY = 64_000_000


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--first-rate", type=int, default=250, help="the search's first rate (changes/s)"
    )
    ap.add_argument("--dts-first-rate", type=int,
                    help="dts's own first rate [--first-rate]: start near what it sustains")  # fmt: skip
    ap.add_argument("--floor", type=int, default=10, help="the lowest rate searched")
    ap.add_argument("--ceiling", type=int, default=128_000, help="the highest rate searched")
    ap.add_argument("--precision", type=float, default=0.10,
                    help="the search stops when kept and not kept are this close")  # fmt: skip
    ap.add_argument("--max-steps", type=int, default=12, help="measured steps per search")
    ap.add_argument("--step-seconds", type=float, default=90.0)
    ap.add_argument("--max-step-seconds", type=float, default=None,
                    help="a step too short to tell (three commits of every table in its "
                         "last two thirds, a clear slope) runs on, a third at a time, up "
                         "to this (default: three steps' length)")  # fmt: skip
    ap.add_argument("--warmup-seconds", type=float, default=30.0,
                    help="before each step, at most this long at its rate, not measured")  # fmt: skip
    ap.add_argument("--shared", type=float, default=0.5,
                    help="then both measured at this share of dts's highest rate (0: not)")  # fmt: skip
    ap.add_argument("--pipelines", nargs="+", default=list(SIDES), choices=list(SIDES))
    ap.add_argument("--trigger", default="1 second", help="dts's Spark streams' trigger")
    ap.add_argument("--tier", default="file", help="the tier dts's Spark streams read")
    ap.add_argument("--barrier-interval", default="1.0", help="dts ingest's seconds per barrier")
    ap.add_argument("--delta-triggers", default="1 second,2 seconds,5 seconds,10 seconds",
                    help="the stitched pipeline's triggers, each searched; its best reported")  # fmt: skip
    ap.add_argument("--paimon-triggers", default="1 second,2 seconds,5 seconds,10 seconds",
                    help="the Paimon variant's triggers, each searched; its best reported")  # fmt: skip
    ap.add_argument("--work", type=Path, help="scratch directory [a temporary one]")
    ap.add_argument("--out", type=Path, default=HERE.parent / "results" / "pipeline.json")
    ap.add_argument("--html", type=Path, default=HERE.parent / "results" / "pipeline.html")
    ap.add_argument("--readme", type=Path, help="rewrite this README's results section")
    ap.add_argument("--initial", type=int, default=200_000,
                    help="changes loaded before the steps, the same for every side (200,000: 118,902 live orders)")  # fmt: skip
    ap.add_argument("--growing", action="store_true",
                    help="keep the initial mix (tables grow) instead of a steady one")  # fmt: skip
    ap.add_argument("--start-timeout", type=float, default=300.0)
    ap.add_argument("--settle-timeout", type=float, default=180.0,
                    help="warm-up at the first rate, at most this long")  # fmt: skip
    ap.add_argument("--profile", action="store_true",
                    help="sample every process of each measured step (py-spy, Flight "
                         "Recorder) into <work>/<pipeline>/profile-<rate>/: a step apart, "
                         "since sampling takes CPU")  # fmt: skip
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
        self.urls: dict[str, str] = {}

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
        ready = json.loads((self.work / READY).read_text())
        self.pids, self.urls = ready["pids"], ready.get("urls", {})

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


def drained(side: Side, last_stamp: float, timeout_s: float) -> bool:
    """Whether, with nothing produced, every table comes to show the changes stamped up
    to ``last_stamp`` (a step that fell behind leaves a backlog the next must not
    inherit). The newest stamp, not the step's end: a generator behind its rate stamps its
    last chunk seconds before it is done sending it, and no table can ever show later."""
    target_ms = (last_stamp - 1.0) * 1000
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        side.check()
        latest = [s["latest"] for s in side.samples()[-3:] if "latest" in s]
        if latest and all(v >= target_ms for v in latest[-1].values()):
            return True
        time.sleep(1.0)
    return False


def trigger_seconds(trigger: str) -> float:
    """A processing-time trigger's seconds ("10 seconds", "1 second", "500 milliseconds")."""
    number, unit = trigger.split()
    return float(number) / (1000 if unit.startswith("milli") else 1)


def settle(
    side: Side, db: OrdersDatabase, producer: Any, topic: str, rate: int, timeout_s: float,
    trigger_s: float,
) -> bool:  # fmt: skip
    """Warm-up, not measured: produce at ``rate`` until every table is within SETTLED_S
    plus one trigger interval of the source (Spark's first batches at a new rate are
    behind; a table fed every 10 s is always up to 10 s old), at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        step = produce_step(db, producer, topic, rate, 5.0)
        side.check()
        recent = [s for s in side.samples() if s["t"] >= step.started and "latest" in s]
        if recent and all(
            s["t"] - v / 1000 <= SETTLED_S + trigger_s
            for s in recent[-2:]
            for v in s["latest"].values()
        ):
            return True
    return False


class Run:
    """One pipeline started, fed and measured step by step."""

    def __init__(self, name: str, broker: EmbeddedBroker, ns: argparse.Namespace,
                 work: Path, trigger: str) -> None:  # fmt: skip
        self.name, self.ns, self.broker = name, ns, broker
        self.topic, customers_topic = f"cdc.{work.name}.orders", f"cdc.{work.name}.customers"
        create_topic(broker.bootstrap, self.topic, PARTITIONS, {})
        create_topic(broker.bootstrap, customers_topic, 1, {})
        # ids are never reused: room for every insert of a long search (numpy's zeroed
        # arrays take memory only where ids are used)
        self.db = OrdersDatabase(capacity=CAPACITY)
        self.producer = cdc_producer(broker.bootstrap)
        # the dimension is in its topic before the pipeline starts: a side loads it before
        # it starts its streams, as a user lets the connector's snapshot land before going live
        customers = produce_customers(self.db, self.producer, customers_topic)
        extra = ["--customers-topic", customers_topic, "--customers", str(customers)]
        if name == "dts":
            extra += ["--tier", ns.tier, "--barrier-interval", ns.barrier_interval]
        self.side = Side(name, broker.bootstrap, self.topic, work, trigger, extra)
        self.trigger_s = trigger_seconds(trigger)
        self.started = time.time()
        self.steps: list[report.StepFigures] = []
        self.last_stamp = 0.0  # the newest change's stamp so far

    def load(self) -> None:
        ns = self.ns
        self.side.await_ready(ns.start_timeout)
        initial = produce_load(self.db, self.producer, self.topic, ns.initial)
        log(f"{self.side.work.name}: ready; initial load of {initial.produced:,} changes "
            f"({self.db.live_orders():,} live orders), waiting for it downstream")  # fmt: skip
        await_caught_up(self.side, initial.ended, ns.start_timeout)
        self.last_stamp = initial.last_stamp
        if not ns.growing:  # every step of the search meets tables of the same size
            self.db.mix = STEADY_MIX

    def measure(self, rate: int, shared: bool = False) -> report.StepFigures:
        ns, side = self.ns, self.side
        if self.steps and not drained(side, self.last_stamp, ns.settle_timeout):
            raise Stalled(f"{side.work.name} did not catch up in {ns.settle_timeout:.0f} s "
                          "with nothing produced")  # fmt: skip
        warmup = ns.settle_timeout if not self.steps else ns.warmup_seconds
        settled = settle(side, self.db, self.producer, self.topic, rate, warmup, self.trigger_s)
        roots = {**side.pids, "broker": self.broker.pid or 0, "generator": os.getpid()}
        sampled = {k: v for k, v in roots.items() if k != "generator"}
        recordings = profile.start(sampled, side.work / f"profile-{rate}") if ns.profile else []
        cpu0, t0 = cpu_seconds(roots), time.monotonic()
        step = self.produce_until_judged(rate)
        cpu1, dt = cpu_seconds(roots), time.monotonic() - t0
        cpu = {k: (cpu1[k] - cpu0.get(k, 0.0)) / dt for k in cpu1}
        if recordings:
            path = side.work / f"profile-{rate}" / "summary.txt"
            path.write_text(profile.report(profile.finish(recordings), cpu))
            log(f"{side.work.name} {rate:,}/s: profile in {path}")
        fig = report.step_figures(side.samples(), rate, step.achieved, step.started,
                                  step.ended, cpu)  # fmt: skip
        fig.shared = shared
        self.steps.append(fig)
        p99 = max((v for v in fig.freshness_p99.values() if v is not None), default=None)
        log(f"{side.work.name} {rate:,}/s{' (shared)' if shared else ''}"
            f"{'' if settled else ' (warm-up did not settle)'}: "
            f"{'kept up' if fig.kept_up else 'fell behind: ' + fig.why}; "
            f"freshness p99 (slowest table) {report._f(p99)} s; "
            f"{fig.inconsistent} inconsistent of {fig.reads} reads; "
            f"{self.db.live_orders():,} live orders")  # fmt: skip
        return fig

    def produce_until_judged(self, rate: int) -> StepResult:
        """A step of ``--step-seconds``, longer by a third at a time (up to
        ``--max-step-seconds``, else three steps) while a table's judged window cannot
        tell a steady lag from a growing one (``report.needs_longer``): a stack whose
        batches take 30-60 s shows whether it keeps up only over several of them."""
        ns, side, third = self.ns, self.side, self.ns.step_seconds / 3
        longest = ns.max_step_seconds or 3 * ns.step_seconds
        step = produce_step(self.db, self.producer, self.topic, rate, ns.step_seconds)
        for _ in range(round(max(longest - ns.step_seconds, 0) / third)):
            side.check()
            fig = report.step_figures(
                side.samples(), rate, step.achieved, step.started, step.ended, {}, final=False
            )
            if not report.needs_longer(fig):
                break
            log(f"{side.work.name} {rate:,}/s: {fig.why}; {third:.0f} s more")
            step = step.extended(produce_step(self.db, self.producer, self.topic, rate, third))
        self.last_stamp = step.last_stamp
        side.check()
        return step


class Stalled(RuntimeError):
    """A pipeline did not work off its backlog: the search cannot go on."""


#: fresh starts of a pipeline whose search a backlog stopped (``Stalled``)
RESTARTS = 2


def run_pipeline(
    name: str, broker: EmbeddedBroker, ns: argparse.Namespace, work: Path, trigger: str,
    bounds: Bounds, shared: Callable[[list[report.StepFigures]], list[int]],
    prior: list[report.StepFigures] | None = None,
) -> tuple[list[report.StepFigures], list[dict[str, Any]], float]:  # fmt: skip
    """The pipeline's search (steered by ``prior`` steps of the same pipeline), then the
    ``shared(its steps)`` rates measured; the steps it measured. A pipeline that cannot
    work off a failed step's backlog (a stitched stack whose next micro-batch takes all
    of it) is started afresh, on the same initial load, up to ``RESTARTS`` times, and its
    search goes on from its steps so far: the backlog is that step's verdict, not the
    search's end (run 6 lost Delta's bisection and shared step to one)."""
    steps: list[report.StepFigures] = []
    samples: list[dict[str, Any]] = []
    started: float | None = None
    for attempt in range(RESTARTS + 1):
        where = work.with_name(f"{work.name}-restart-{attempt}") if attempt else work
        run = Run(name, broker, ns, where, trigger)
        started = run.started if started is None else started
        log(f"{where.name}: starting its pipeline, trigger {trigger} (log: {run.side.log_path})")
        stalled = False
        try:
            run.load()
            search(run.measure, bounds, [*(prior or []), *steps])
            for rate in shared([*steps, *run.steps]):
                run.measure(rate, shared=True)
        except Stalled as exc:
            stalled = True
            log(f"{where.name}: search stopped: {exc}")
        finally:
            log(f"{where.name}: stopping its pipeline")
            run.side.stop()
        steps += run.steps
        samples += run.side.samples()
        if not stalled:
            break
    assert started is not None
    return steps, samples, started


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ns = parse(argv)
    set_up(ns.pipelines)
    load_before = os.getloadavg()[0]
    runs: dict[str, list[report.StepFigures]] = {}
    samples: dict[str, list[Any]] = {}
    starts: dict[str, float] = {}
    sweeps: dict[str, dict[str, int]] = {}
    with contextlib.ExitStack() as stack:
        work = ns.work or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-pipeline-"))
        )
        work.mkdir(parents=True, exist_ok=True)
        log(f"work directory {work}; starting the Kafka broker")
        broker = EmbeddedBroker(log_path=work / "broker.log").start()
        stack.callback(broker.stop)
        shared: list[int] = []

        def half_of_dts(steps: list[report.StepFigures]) -> list[int]:
            best = report.highest_kept(steps)
            shared[:] = [max(ns.floor, int(best * ns.shared))] if ns.shared and best else []
            return shared

        bounds = Bounds(ns.first_rate, ns.floor, ns.ceiling, ns.precision, ns.max_steps)
        if "dts" in ns.pipelines:
            first = ns.dts_first_rate or ns.first_rate
            runs["dts"], samples["dts"], starts["dts"] = run_pipeline(
                "dts", broker, ns, work / "dts", ns.trigger, replace(bounds, first=first),
                half_of_dts,
            )  # fmt: skip
        for name in (n for n in STITCHED if n in ns.pipelines):
            triggers = [t.strip() for t in getattr(ns, f"{name}_triggers").split(",")]
            runs[name], samples[name], starts[name], sweeps[name] = sweep_triggers(
                name, triggers, broker, ns, work, bounds, lambda _: shared
            )
    return finish(ns, argv, runs, samples, starts, sweeps, load_before)


def sweep_triggers(
    name: str, triggers: list[str], broker: EmbeddedBroker, ns: argparse.Namespace,
    work: Path, bounds: Bounds, shared: Callable[[list[report.StepFigures]], list[int]],
) -> tuple[list[report.StepFigures], list[dict[str, Any]], float, dict[str, int]]:  # fmt: skip
    """A stitched stack at its best trigger: each trigger searched by doubling, the best
    restarted and bisected from there, then measured at the shared rates. Returns its
    steps at that trigger (both runs'), their samples, its first start and the highest
    rate each trigger kept."""
    if len(triggers) == 1:  # nothing to rank: one full search
        steps, got, started = run_pipeline(name, broker, ns, work / f"{name}-0", triggers[0],
                                           bounds, shared)  # fmt: skip
        return steps, got, started, {triggers[0]: report.highest_kept(steps)}
    found: dict[str, tuple[list[report.StepFigures], list[dict[str, Any]], float]] = {}
    for i, trigger in enumerate(triggers):
        best = max((report.highest_kept(f[0]) for f in found.values()), default=0)
        found[trigger] = run_pipeline(name, broker, ns, work / f"{name}-{i}", trigger,
                                      coarse(bounds, best), lambda _: [])  # fmt: skip
    sweep = {t: report.highest_kept(f[0]) for t, f in found.items()}
    winner = best_setting({t: f[0] for t, f in found.items()})
    prior, got, started = found[winner]
    log(f"{name}: trigger {winner} kept up at the highest rate ({sweep[winner]:,}/s); "
        "restarting it to bisect")  # fmt: skip
    if first_rate(bounds, prior) is None and not shared(prior):
        return prior, got, started, sweep
    more, got_more, _ = run_pipeline(name, broker, ns, work / f"{name}-best", winner, bounds,
                                     shared, prior)  # fmt: skip
    steps = [*prior, *more]
    sweep[winner] = report.highest_kept([s for s in steps if not s.shared])
    return steps, [*got, *got_more], started, sweep


def set_up(pipelines: list[str]) -> None:
    """What the stitched sides need, before any pipeline starts (first use: minutes)."""
    if "delta" in pipelines:
        from bench.pipeline.readers_apart import DELTA_RS
        from bench.spark_peers.__main__ import fetch_jars

        fetch_jars("delta")
        DELTA_RS.ensure()
    if "paimon" in pipelines:
        from bench.pipeline import paimon_side

        paimon_side.set_up()


def finish(ns: argparse.Namespace, argv: list[str] | None,
           runs: dict[str, list[report.StepFigures]], samples: dict[str, list[Any]],
           starts: dict[str, float], sweeps: dict[str, dict[str, int]],
           load_before: float) -> dict[str, Any]:  # fmt: skip
    out = report.summary(runs, samples)
    out.update(load_before=load_before, load_after=os.getloadavg()[0], trigger=ns.trigger,
               sweeps=sweeps, step_seconds=ns.step_seconds, cores=os.cpu_count())  # fmt: skip
    table = report.format_table(runs)
    ran = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    args = " ".join(sys.argv[1:] if argv is None else argv)
    text = (f"Last run {ran}, `python -m bench.pipeline {args}`:\n\n"
            f"{table}\n\n{report.format_summary(out)}\n\nload average {load_before:.2f} before, "
            f"{out['load_after']:.2f} after; {os.cpu_count()} cores; trigger dts {ns.trigger}"
            f"{''.join(_sweep(n, sweep) for n, sweep in sweeps.items())}; "
            f"{ns.step_seconds:g} s per step")  # fmt: skip
    print("\n" + text, flush=True)
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(json.dumps(out, indent=2))
    report.write_html(ns.html, samples, runs, starts, text)
    print(f"\nresults: {ns.out}\nHTML: {ns.html.resolve().as_uri()}", flush=True)
    if ns.readme is not None:
        replace_section(ns.readme, BEGIN, END, text)
    return out


def _sweep(name: str, sweep: dict[str, int]) -> str:
    rates = ", ".join(f"{t}: {r:,}/s" for t, r in sweep.items())
    how = " (each doubled, the best bisected)" if len(sweep) > 1 else ""
    return f", {report.RATIO[name][1]}{how} {rates}"


if __name__ == "__main__":
    from bridge.commands.signals import sigterm_as_interrupt

    # SIGTERM (a supervisor, `kill`) takes Ctrl-C's way out: the sides and the broker stop
    with sigterm_as_interrupt():
        main()
