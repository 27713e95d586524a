"""Worker benchmark: log -> committed FileStore snapshots, against Faust and raw Kafka.

Measured in one run on the embedded broker, same topic layout (4 partitions),
same rows (3 columns, primary key, upserts):

- raw confluent-kafka consumption of the table's records (assign, no decode);
- a bare Faust agent that only counts the records (take_events batches);
- `dts worker` with 1 and with 2 processes: rows/s from the first record
  consumed to the last barrier's snapshot committed;
- freshness with barriers every 1 s: produce -> the barrier's snapshot
  readable, p50 / p99 (rows produced at a steady rate, one worker).

Consumers are started first (group joined), then the rows are produced as fast
as the LogWriter goes (faster than any Faust consumer), so the measured rate
is the consumer's.

Usage: python -m bench.bench_worker --rows 300000 --out bench/results/worker.json
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
from pathlib import Path

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, TopicPartition

from filestore import Catalog, Table, bucket_ids
from logstore.broker import EmbeddedBroker, free_port
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


def make_table(warehouse: str) -> Table:
    name = f"bench.w_{uuid.uuid4().hex[:8]}"
    return Catalog(warehouse).create_table(
        name, SCHEMA, primary_key=["id"], options={"bucket": str(BUCKETS)}
    )


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
    if since or not barriers:
        barriers.append(writer.barrier())
    return barriers


# --------------------------------------------------------------------------- workers


def start_worker(
    warehouse: str, bootstrap: str, table: str, group: str, log_dir: str
) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    cmd = [
        sys.executable, "-m", "bridge.cli", "worker", "--warehouse", warehouse, "--bootstrap", bootstrap,
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


def consumed(port: int, table: str) -> int:
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2).read()
    except OSError:
        return 0
    return sum(
        b["next_offset"] for b in json.loads(body)["tables"].get(table, {}).get("buckets", [])
    )


def wait(cond, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise SystemExit(f"timed out after {timeout_s:.0f}s waiting for {what}")


def bench_workers(
    bootstrap: str, warehouse: str, n: int, workers: int, log_dir: str
) -> dict[str, float]:
    table = make_table(warehouse)
    writer = writer_for(table, bootstrap)
    writer.barrier()  # topic exists with a first (empty) barrier, so workers can join
    group = f"bench-{uuid.uuid4().hex[:6]}"
    procs = [start_worker(warehouse, bootstrap, table.name, group, log_dir) for _ in range(workers)]
    try:
        wait(lambda: set().union(*(owned(p, table.name) for _, p in procs)) == set(range(BUCKETS))
             and all(owned(p, table.name) for _, p in procs), 90, f"{workers} worker(s) to join")  # fmt: skip
        started = time.monotonic()
        barriers = produce_all(writer, n)
        produced = time.monotonic() - started
        last = barriers[-1]
        wait(
            lambda: (s := table.latest_snapshot()) is not None and s.barrier == last,
            900,
            "the last barrier",
        )
        elapsed = time.monotonic() - started
        got = table.read(columns=["id"]).num_rows
    finally:
        for proc, _ in procs:
            proc.send_signal(signal.SIGTERM)
        for proc, _ in procs:
            proc.wait(timeout=60)
        writer.close(final_barrier=False)
    return {"rows": n, "seconds": elapsed, "rows_per_s": n / elapsed, "produce_s": produced, "rows_in_table": got,
            "barriers": len(barriers)}  # fmt: skip


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


def bench_faust_counter(bootstrap: str, warehouse: str, n: int) -> dict[str, float]:
    table = make_table(warehouse)
    writer = writer_for(table, bootstrap)
    writer.barrier()
    topic = writer.spec.topic
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
        time.sleep(8)  # group join (the READY task runs before the assignment)
        started = time.monotonic()
        produce_all(writer, n)
        line = proc.stdout.readline()
        elapsed = time.monotonic() - started
        if "DONE" not in line:
            raise SystemExit(f"faust counter failed: {line!r}")
    finally:
        proc.kill()
        proc.wait()
        os.unlink(f.name)
        writer.close(final_barrier=False)
    return {"rows": n, "seconds": elapsed, "rows_per_s": n / elapsed}


def bench_raw_consume(bootstrap: str, warehouse: str, n: int) -> dict[str, float]:
    table = make_table(warehouse)
    writer = writer_for(table, bootstrap)
    produce_all(writer, n)
    writer.close(final_barrier=False)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "isolation.level": "read_committed", "log_level": 3})  # fmt: skip
    c.assign([TopicPartition(writer.spec.topic, p, 0) for p in range(BUCKETS)])
    got, started = 0, time.monotonic()
    while got < n and time.monotonic() - started < 300:
        for m in c.consume(10_000, 0.5):
            if m.error() is None and m.value() is not None:
                got += 1
    elapsed = time.monotonic() - started
    c.close()
    return {"rows": got, "seconds": elapsed, "rows_per_s": got / elapsed}


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
        next_barrier = start + 1.0
        i = 0
        while time.time() - start < seconds:
            writer.write(rows(i, per_batch, 1_000_000))
            open_writes.append(time.time())
            i += per_batch
            if time.time() >= next_barrier:
                samples.append((writer.barrier(), open_writes))
                open_writes, next_barrier = [], next_barrier + 1.0
            time.sleep(0.05)
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
    }


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "worker.json")
    parser.add_argument("--freshness-seconds", type=float, default=15.0)
    args = parser.parse_args()
    n = args.rows
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="dts-bench-worker-") as tmp, EmbeddedBroker() as broker:
        warehouse = str(Path(tmp) / "warehouse")
        os.makedirs(warehouse)
        steps = [
            (
                "raw confluent-kafka consume",
                lambda: bench_raw_consume(broker.bootstrap, warehouse, n),
            ),
            (
                "bare Faust agent (count)",
                lambda: bench_faust_counter(broker.bootstrap, warehouse, n),
            ),
            ("dts worker x1", lambda: bench_workers(broker.bootstrap, warehouse, n, 1, tmp)),
            ("dts worker x2", lambda: bench_workers(broker.bootstrap, warehouse, n, 2, tmp)),
        ]
        for name, step in steps:
            print(f"-- {name}: {n:,} rows ...", flush=True)
            results[name] = step()
            print(
                f"   {results[name]['rows_per_s']:,.0f} rows/s in {results[name]['seconds']:.1f}s",
                flush=True,
            )
        print(f"-- freshness: barriers every 1 s for {args.freshness_seconds:.0f}s ...", flush=True)
        results["freshness"] = bench_freshness(
            broker.bootstrap, warehouse, args.freshness_seconds, 2_000, tmp
        )
    faust_rate = results["bare Faust agent (count)"]["rows_per_s"]
    raw_rate = results["raw confluent-kafka consume"]["rows_per_s"]
    print(f"\n{'what':32} {'rows/s':>12} {'vs Faust':>9} {'vs raw':>8}")
    for name in (
        "raw confluent-kafka consume",
        "bare Faust agent (count)",
        "dts worker x1",
        "dts worker x2",
    ):
        r = results[name]["rows_per_s"]
        print(f"{name:32} {r:12,.0f} {r / faust_rate:9.2f} {r / raw_rate:8.3f}")
    f = results["freshness"]
    print(f"\nfreshness (barrier.interval=1s, 1 worker): p50 {f['p50_ms']:.0f} ms, p99 {f['p99_ms']:.0f} ms, "
          f"max {f['max_ms']:.0f} ms over {f['barriers']:.0f} barriers")  # fmt: skip
    results["ratios"] = {
        "worker1_vs_faust": results["dts worker x1"]["rows_per_s"] / faust_rate,
        "worker2_vs_faust": results["dts worker x2"]["rows_per_s"] / faust_rate,
        "faust_vs_raw": faust_rate / raw_rate,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"\nresults in {args.out}")


if __name__ == "__main__":
    main()
