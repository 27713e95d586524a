"""Worker benchmark: a pre-produced backlog drained into FileStore snapshots,
against raw confluent-kafka and a bare Faust agent on the same topic.

Measured in one run on the embedded broker, on ONE topic (4 partitions) holding
``--rows`` rows (3 columns, primary key, upserts, a barrier every 20k rows):

- raw confluent-kafka consumption of the topic (assign, no decode): the ceiling;
- a bare Faust agent that only counts the records (take_events batches);
- `dts worker` with 1 and with 2 processes draining the backlog: rows/s from the
  group's assignment to the last barrier's snapshot committed (each run a fresh
  table whose ``log.topic`` is the shared topic), with per-process CPU seconds
  and the worker's peak RSS;
- freshness with barriers every 1 s while a producer writes at half of x1's rate:
  produce -> the barrier's snapshot readable, p50 / p99.

``--profile`` samples worker x1 with py-spy and prints where its time goes.

Usage: python -m bench.bench_worker --rows 500000 --out bench/results/worker.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.profiles import summarize_profile
from bench.raw_consume import raw_consume
from bench.results import save_results
from filestore import Catalog, Table, bucket_ids
from logstore.broker import EmbeddedBroker
from logstore.localhost import free_port
from logstore.writer import LogWriter

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])
BUCKETS = 4
BARRIER_ROWS = 20_000
PRODUCE_BATCH = 10_000


def rows(start: int, n: int, keys: int) -> pa.Table:
    ids = (np.arange(start, start + n, dtype=np.int64) * 7919) % keys
    return pa.table(
        {
            "id": ids,
            "name": pa.array(np.char.add("name-", ids.astype(str)).astype(object)),
            "amount": ids.astype(np.float64) * 0.5,
        }
    )


def make_table(warehouse: str, topic: str | None = None) -> Table:
    name = f"bench.w_{uuid.uuid4().hex[:8]}"
    options = {"bucket": str(BUCKETS), **({"log.topic": topic} if topic else {})}
    return Catalog(warehouse).create_table(name, SCHEMA, primary_key=["id"], options=options)


def writer_for(table: Table, bootstrap: str) -> LogWriter:
    from bridge.tables import log_spec_for

    spec = log_spec_for(table)
    keys = table.bucket_keys
    return LogWriter(
        bootstrap, spec, lambda t: bucket_ids(t, keys, BUCKETS), barrier_interval_s=None
    )


def produce_all(writer: LogWriter, n: int) -> list[int]:
    """n rows, a barrier every BARRIER_ROWS rows (and one at the end)."""
    barriers, since = [], 0
    for start in range(0, n, PRODUCE_BATCH):
        k = min(PRODUCE_BATCH, n - start)
        writer.write(rows(start, k, max(n // 2, 1)))
        since += k
        if since >= BARRIER_ROWS:
            barriers.append(writer.barrier())
            since = 0
        if start % (10 * PRODUCE_BATCH) == 0:
            print(f"   produced {start + k:,}/{n:,} rows", end="\r", flush=True)
    if since or not barriers:
        barriers.append(writer.barrier())
    return barriers


# --------------------------------------------------------------------------- workers


def start_worker(
    warehouse: str, bootstrap: str, table: str, group: str, log_dir: str
) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    cmd = [
        sys.executable, "-m", "bridge", "worker", "--warehouse", warehouse, "--bootstrap", bootstrap,
        "--tables", table, "--group", group, "--web-port", str(port), "--session-timeout", "6",
    ]  # fmt: skip
    log = open(Path(log_dir) / f"worker-{port}.log", "wb")  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    return proc, port


def owned(port: int, table: str) -> set[int]:
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2).read()
    except OSError:
        return set()
    return {b["bucket"] for b in json.loads(body)["tables"].get(table, {}).get("buckets", [])}


def wait(cond, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise SystemExit(f"timed out after {timeout_s:.0f}s waiting for {what}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def bench_workers(
    bootstrap: str,
    warehouse: str,
    topic: str,
    backlog: Backlog,
    workers: int,
    log_dir: str,
    broker_pid: int | None,
    profile: Path | None = None,
) -> dict[str, float]:
    """Workers join a group on a fresh table over the backlog's topic and drain it."""
    table = make_table(warehouse, topic)
    group = f"bench-{uuid.uuid4().hex[:6]}"
    procs = [start_worker(warehouse, bootstrap, table.name, group, log_dir) for _ in range(workers)]
    spy: subprocess.Popen[bytes] | None = None
    try:
        # the first assignment positions the workers: from then on they drain the backlog
        wait(lambda: set().union(*(owned(p, table.name) for _, p in procs)) == set(range(BUCKETS))
             and all(owned(p, table.name) for _, p in procs), 120, f"{workers} worker(s) to join")  # fmt: skip
        if profile is not None:
            spy = subprocess.Popen(
                [str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(procs[0][0].pid), "--format", "raw",
                 "--output", str(profile), "--rate", "50", "--threads", "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        cpu0 = {p.pid: cpu_seconds(p.pid) for p, _ in procs}
        broker0 = cpu_seconds(broker_pid) if broker_pid else 0.0
        started = time.monotonic()
        last = backlog.barriers[-1]
        wait(
            lambda: (s := table.latest_snapshot()) is not None and (s.barrier or 0) >= last,
            900,
            "the last barrier",
        )
        elapsed = time.monotonic() - started
        cpu = [cpu_seconds(p.pid) - cpu0[p.pid] for p, _ in procs]
        broker_cpu = (cpu_seconds(broker_pid) - broker0) if broker_pid else float("nan")
        rss = max(peak_rss_mib(p.pid) for p, _ in procs)
        got = table.read(columns=["id"]).num_rows
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
        for proc, _ in procs:
            proc.send_signal(signal.SIGTERM)
        for proc, _ in procs:
            proc.wait(timeout=60)
    n = backlog.rows
    return {"rows": n, "seconds": elapsed, "rows_per_s": n / elapsed, "rows_in_table": got,
            "barriers": len(backlog.barriers), "peak_rss_mib": rss,
            "cpu_util_per_worker": [c / elapsed for c in cpu],
            "broker_cpu_util": broker_cpu / elapsed}  # fmt: skip


# --------------------------------------------------------------------------- peers


FAUST_COUNTER = """
import sys, time, faust
bootstrap, topic, expect, group, port = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
app = faust.App(group, broker=f"kafka://{bootstrap}", web_enabled=False, topic_disable_leader=True,
    topic_allow_declare=False, consumer_auto_offset_reset="earliest", broker_session_timeout=6,
    broker_heartbeat_interval=0.5, broker_rebalance_timeout=6, broker_max_poll_records=20000,
    stream_buffer_maxsize=20000)
t = app.topic(topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
state = {"n": 0, "first": None}
@app.agent(t)
async def count(stream):
    async for events in stream.take_events(20000, within=0.05):
        if state["first"] is None:
            state["first"] = time.time()
        state["n"] += sum(1 for e in events if e.message.value is not None)
        if state["n"] >= expect:
            print(f"DONE {state['first']} {time.time()} {state['n']}", flush=True)
            import os; os._exit(0)
@app.task
async def ready():
    print("READY", flush=True)
faust.Worker(app, loglevel="WARNING", redirect_stdouts=False, quiet=True).execute_from_commandline()
"""


@dataclass
class Backlog:
    topic: str
    rows: int
    barriers: list[int]
    produce_s: float


def make_backlog(bootstrap: str, warehouse: str, n: int) -> Backlog:
    """The shared topic: n rows, a barrier every BARRIER_ROWS rows."""
    table = make_table(warehouse)
    writer = writer_for(table, bootstrap)
    started = time.monotonic()
    barriers = produce_all(writer, n)
    writer.close(final_barrier=False)
    return Backlog(writer.spec.topic, n, barriers, time.monotonic() - started)


def bench_faust_counter(bootstrap: str, topic: str, n: int) -> dict[str, float]:
    """A bare Faust agent counting the topic's first n data records (from its first one)."""
    group = f"bench-faust-{uuid.uuid4().hex[:6]}"
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(FAUST_COUNTER)
    proc = subprocess.Popen(
        [sys.executable, f.name, bootstrap, topic, str(n), group, "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "READY" not in line:
            raise SystemExit(f"faust counter did not start: {line!r}")
        line = proc.stdout.readline()
        if "DONE" not in line:
            raise SystemExit(f"faust counter failed: {line!r}")
        _, first, last, _count = line.split()
        elapsed = float(last) - float(first)
    finally:
        proc.kill()
        proc.wait()
        os.unlink(f.name)
    return {"rows": n, "seconds": elapsed, "rows_per_s": n / elapsed}


# --------------------------------------------------------------------------- freshness


def bench_freshness(
    bootstrap: str, warehouse: str, seconds: float, rate: int, log_dir: str
) -> dict[str, float]:
    """Rows at ``rate``/s in 50 ms batches, a barrier every 1 s; latency to the snapshot."""
    table = make_table(warehouse)
    writer = writer_for(table, bootstrap)
    writer.barrier()
    proc, port = start_worker(
        warehouse, bootstrap, table.name, f"fresh-{uuid.uuid4().hex[:6]}", log_dir
    )
    seen: dict[int, float] = {}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            s = table.latest_snapshot()
            if s is not None and s.barrier is not None and s.barrier not in seen:
                seen[s.barrier] = time.time()
            time.sleep(0.01)

    try:
        wait(lambda: owned(port, table.name) == set(range(BUCKETS)), 90, "the worker to join")
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        per_batch = max(rate // 20, 1)
        open_writes: list[float] = []
        samples: list[tuple[int, list[float]]] = []
        start = time.time()
        next_barrier, next_write = start + 1.0, start
        i = 0
        while time.time() - start < seconds:
            writer.write(rows(i, per_batch, 1_000_000))
            open_writes.append(time.time())
            i += per_batch
            if time.time() >= next_barrier:
                samples.append((writer.barrier(), open_writes))
                open_writes, next_barrier = [], next_barrier + 1.0
            next_write += 0.05  # paced by the clock: the write's own time is part of the 50 ms
            time.sleep(max(next_write - time.time(), 0.0))
        achieved = i / (time.time() - start)
        samples.append((writer.barrier(), open_writes))
        last = samples[-1][0]
        wait(lambda: last in seen, 60, "the last barrier")
    finally:
        stop.set()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        writer.close(final_barrier=False)
    lat = np.array([seen[b] - t for b, ts in samples for t in ts if b in seen])
    return {
        "barriers": len(samples),
        "p50_ms": float(np.percentile(lat, 50) * 1000),
        "p99_ms": float(np.percentile(lat, 99) * 1000),
        "max_ms": float(lat.max() * 1000),
        "rate_rows_per_s": rate,
        "achieved_rows_per_s": achieved,
    }


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--faust-rows", type=int, default=60_000,
                        help="records the bare Faust agent counts (it is ~20x slower)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "worker.json")
    parser.add_argument("--freshness-seconds", type=float, default=15.0)
    parser.add_argument("--profile", action="store_true", help="py-spy profile of worker x1")
    args = parser.parse_args()
    n = max(args.rows, 500_000)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="dts-bench-worker-") as tmp, EmbeddedBroker() as broker:
        warehouse = str(Path(tmp) / "warehouse")
        os.makedirs(warehouse)
        print(f"-- backlog: {n:,} rows, a barrier every {BARRIER_ROWS:,} ...", flush=True)
        backlog = make_backlog(broker.bootstrap, warehouse, n)
        print(f"   produced in {backlog.produce_s:.1f}s ({len(backlog.barriers)} barriers)")
        broker_pid = getattr(broker, "pid", None)
        profile = Path(tmp) / "worker.spy" if args.profile else None
        steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [
            ("raw confluent-kafka consume", lambda: raw_consume(broker.bootstrap, backlog.topic, BUCKETS, n)),
            ("bare Faust agent (count)",
             lambda: bench_faust_counter(broker.bootstrap, backlog.topic, args.faust_rows)),
            ("dts worker x1", lambda: bench_workers(
                broker.bootstrap, warehouse, backlog.topic, backlog, 1, tmp, broker_pid, profile)),
            ("dts worker x2", lambda: bench_workers(
                broker.bootstrap, warehouse, backlog.topic, backlog, 2, tmp, broker_pid)),
        ]  # fmt: skip
        for name, step in steps:
            print(f"-- {name} ...", flush=True)
            results[name] = step()
            r = results[name]
            print(f"   {r['rows_per_s']:,.0f} rows/s ({r['rows']:,} rows in {r['seconds']:.1f}s)")
        rate = int(results["dts worker x1"]["rows_per_s"] / 2)
        print(f"-- freshness: barriers every 1 s, {rate:,} rows/s for "
              f"{args.freshness_seconds:.0f}s ...", flush=True)  # fmt: skip
        results["freshness"] = bench_freshness(
            broker.bootstrap, warehouse, args.freshness_seconds, rate, tmp
        )
        if profile is not None:
            results["profile"] = summarize_profile(profile)
    report(results)
    save_results(args.out, results)


def report(results: dict[str, Any]) -> None:
    faust_rate = results["bare Faust agent (count)"]["rows_per_s"]
    raw_rate = results["raw confluent-kafka consume"]["rows_per_s"]
    x1 = results["dts worker x1"]
    x2 = results["dts worker x2"]
    print(f"\n{'what':32} {'rows/s':>12} {'vs Faust':>9} {'vs raw':>8}")
    for name in ("raw confluent-kafka consume", "bare Faust agent (count)", "dts worker x1",
                 "dts worker x2"):  # fmt: skip
        r = results[name]["rows_per_s"]
        print(f"{name:32} {r:12,.0f} {r / faust_rate:9.2f} {r / raw_rate:8.3f}")
    results["ratios"] = {
        "worker1_vs_raw": x1["rows_per_s"] / raw_rate,
        "worker2_vs_worker1": x2["rows_per_s"] / x1["rows_per_s"],
        "worker1_vs_faust": x1["rows_per_s"] / faust_rate,
    }
    ratios = results["ratios"]
    print(f"\nworker x1 / raw consume: {ratios['worker1_vs_raw']:.2f} (target >= 0.40)")
    print(f"worker x2 / worker x1:   {ratios['worker2_vs_worker1']:.2f} (target >= 1.6)")
    for name in ("dts worker x1", "dts worker x2"):
        r = results[name]
        cpu = ", ".join(f"{c:.0%}" for c in r["cpu_util_per_worker"])
        print(f"{name}: CPU per worker {cpu} of one core, broker {r['broker_cpu_util']:.0%}; "
              f"peak RSS {r['peak_rss_mib']:.0f} MiB")  # fmt: skip
    f = results["freshness"]
    print(f"freshness (barrier.interval=1s, 1 worker, {f['achieved_rows_per_s']:,.0f} rows/s): "
          f"p50 {f['p50_ms']:.0f} ms, p99 {f['p99_ms']:.0f} ms, max {f['max_ms']:.0f} ms "
          f"over {f['barriers']:.0f} barriers (target p99 <= 2000 ms)")  # fmt: skip
    if "profile" in results:
        print("\nworker x1 profile (share of samples, by function, all threads):")
        for line in results["profile"]:
            print(f"  {line}")


if __name__ == "__main__":
    main()
