"""Ingest benchmark: `dts ingest` of a Debezium topic beside a raw confluent-kafka consume
of the same topic (issue 24's target: >= 0.7x, start-up under 2 s).

One run on the embedded broker, one source topic (4 partitions) holding ``--rows``
Debezium 2.x MySQL change events as the JsonConverter writes them without a schema
(``source`` block, ``ts_ms``, ``transaction``; a DECIMAL in ``precise`` mode as base64,
a DATETIME as epoch microseconds; 80% creates, 20% updates):

- raw confluent-kafka consume of the topic in a fresh process (`bench.raw_consume`: assign,
  read_committed, no decode, the same fetch sizes as the ingest: 16 MB per partition,
  larger than the 1 MB default that halves a raw consumer's rate on these ~0.5 KB
  events): the ceiling of any consumer;
- raw confluent-kafka copy in a fresh process (`bench.raw_consume.raw_copy`): the same
  consume, each record's bytes produced as they are into a 4-partition topic with the log
  writer's producer settings, one transaction a second (the ingest's barriers), no
  decode: the ceiling of any Python ingest that re-writes every record, and with the
  broker's CPU, the 2-core bound of such a copy;
- `dts ingest` in this process (``logstore.ingest.Ingestor``): records/s from its first
  consume to the last barrier committed (decode, re-encode for the table, transactional
  produce with the source offsets), its start-up (from nothing to the first record), and
  the CPU seconds it and the broker spent: on two cores, their sum per record bounds the
  rate any ingest can reach (``bound_rows_per_s``);
- `dts ingest` as users run it (the CLI in a fresh process): seconds until it says
  where it ingests (start-up), and the whole copy's wall time.

Usage: python -m bench.bench_ingest --rows 1000000 --out bench/results/ingest.json
"""

from __future__ import annotations

import argparse
import base64
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
from confluent_kafka import Producer

from bench.bench_worker import cpu_seconds
from bench.raw_consume import raw_consume, raw_copy
from bench.results import save_results
from bridge.commands.heap import freeze_start_up_objects
from bridge.tables import bucketer_for, log_spec_for
from filestore import Catalog, Table
from logstore.broker import EmbeddedBroker
from logstore.ingest import Ingestor, IngestStats
from logstore.topics import create_topic
from logstore.writer import PRODUCER_DEFAULTS

ROOT = Path(__file__).resolve().parents[1]
PARTITIONS = 4
#: the ingest's fetch size (16 MB a partition), also the raw consume's: the 1 MB default
#: halves a raw consumer's rate on these ~0.5 KB events
FETCH_BYTES = 16 << 20
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("customer", pa.int64()),
        ("amount", pa.decimal128(12, 2)),
        ("status", pa.string()),
        ("updated_at", pa.timestamp("us")),
    ]
)
SOURCE = {
    "version": "2.7.3.Final",
    "connector": "mysql",
    "name": "shop",
    "ts_ms": 1732460000000,
    "snapshot": "false",
    "db": "shop",
    "sequence": None,
    "table": "orders",
    "server_id": 223344,
    "gtid": None,
    "file": "mysql-bin.000003",
    "pos": 805,
    "row": 0,
    "thread": 7,
    "query": None,
}


def _amount(cents: int) -> str:
    n = max(1, (cents.bit_length() + 8) // 8)
    return base64.b64encode(cents.to_bytes(n, "big", signed=True)).decode()


def _event(i: int, keys: int) -> tuple[bytes, bytes]:
    key = i % keys
    image = {
        "id": key,
        "customer": key % 997,
        "amount": _amount(1000 + i % 50_000),
        "status": ("new", "paid", "shipped")[i % 3],
        "updated_at": 1_732_460_000_000_000 + i,
    }
    update = i >= keys
    envelope = {
        "before": {**image, "status": "new"} if update else None,
        "after": image,
        "source": SOURCE,
        "op": "u" if update else "c",
        "ts_ms": 1732460000123,
        "transaction": None,
    }
    return orjson.dumps({"id": key}), orjson.dumps(envelope)


def produce_source(bootstrap: str, topic: str, n: int) -> float:
    create_topic(bootstrap, topic, PARTITIONS, {})
    config = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 20,
        "compression.type": "lz4",
        "queue.buffering.max.messages": 1_000_000,
        "batch.size": 1_000_000,
    }
    producer = Producer(config)
    keys = int(n * 0.8)
    started = time.monotonic()
    for i in range(n):
        key, value = _event(i, keys)
        while True:
            try:
                producer.produce(topic, value, key, i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 100_000 == 0:
            producer.poll(0)
    producer.flush(120)
    return time.monotonic() - started


def make_table(warehouse: str) -> Table:
    name = f"bench.orders_{uuid.uuid4().hex[:8]}"
    return Catalog(warehouse).create_table(
        name, SCHEMA, primary_key=["id"], options={"bucket": str(PARTITIONS)}
    )


def bench_ingestor(
    bootstrap: str, warehouse: str, topic: str, n: int, broker_pid: int | None
) -> dict[str, float]:
    """In-process: start-up to the first record, then records/s to the last barrier."""
    table = make_table(warehouse)
    t0 = time.monotonic()
    ingestor = Ingestor(
        bootstrap, topic, log_spec_for(table), bucketer_for(table), barrier_interval_s=1.0
    )
    freeze_start_up_objects()  # as `dts ingest` does before its copy
    built = time.monotonic() - t0
    first: list[float] = []
    done: list[float] = []

    def on_barrier(stats: IngestStats) -> None:
        if stats.records >= n and not done:
            done.append(time.monotonic())

    original = ingestor._process  # the first batch's arrival marks the end of start-up

    def process(msgs: list[Any], *args: Any) -> Any:
        if not first:
            first.append(time.monotonic())
        return original(msgs, *args)

    ingestor._process = process  # type: ignore[method-assign,assignment]
    cpu0 = time.process_time()
    broker0 = cpu_seconds(broker_pid) if broker_pid else 0.0
    try:
        stats = ingestor.run(idle_exit_s=2.0, on_barrier=on_barrier)
    finally:
        ingestor.close()
    cpu = time.process_time() - cpu0
    broker_cpu = cpu_seconds(broker_pid) - broker0 if broker_pid else float("nan")
    if stats.records < n or not done or not first:
        raise RuntimeError(f"ingest copied {stats.records:,} of {n:,} records")
    seconds = done[0] - first[0]
    return {
        "rows": stats.records,
        "seconds": seconds,
        "rows_per_s": stats.records / seconds,
        "startup_s": first[0] - t0,
        "construct_s": built,
        "barriers": stats.barriers,
        "cpu_s": cpu,
        "broker_cpu_s": broker_cpu,
        # two cores shared by this process and the broker: the fastest any ingest of this
        # much work per record could go
        "bound_rows_per_s": 2 * stats.records / (cpu + broker_cpu),
    }


def bench_raw_copy(bootstrap: str, topic: str, n: int, broker_pid: int | None) -> dict[str, float]:
    """A raw transactional copy of the topic (no decode), with the broker's CPU for it."""
    sink = f"{topic}.copy"
    create_topic(bootstrap, sink, PARTITIONS, {})
    producer = {**PRODUCER_DEFAULTS, "transaction.timeout.ms": 60_000}
    broker0 = cpu_seconds(broker_pid) if broker_pid else 0.0
    out = raw_copy(bootstrap, topic, PARTITIONS, n, FETCH_BYTES, sink, producer)
    broker_cpu = cpu_seconds(broker_pid) - broker0 if broker_pid else float("nan")
    return {
        **out,
        "broker_cpu_s": broker_cpu,
        "bound_rows_per_s": 2 * out["rows"] / (out["cpu_s"] + broker_cpu),
    }


def bench_cli(bootstrap: str, warehouse: str, topic: str, n: int) -> dict[str, float]:
    """`dts ingest` in a fresh process: start-up until it prints where it ingests."""
    table = make_table(warehouse)
    cmd = [sys.executable, "-m", "bridge", "ingest", "--from-topic", topic, "--table",
           table.name, "--warehouse", warehouse, "--bootstrap", bootstrap, "--idle-exit", "2",
           "--barrier-interval", "1"]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    ready = None
    for line in proc.stderr:
        if ready is None and line.startswith("ingesting "):
            ready = time.monotonic() - started
    out, _ = proc.communicate(timeout=600)
    wall = time.monotonic() - started
    cpu = cpu_seconds(proc.pid) if proc.returncode is None else float("nan")
    if proc.returncode != 0 or f"done: {n:,} records" not in out:
        raise RuntimeError(f"dts ingest failed ({proc.returncode}): {out[-500:]}")
    return {"rows": n, "startup_s": ready or float("nan"), "wall_s": wall, "cpu_s": cpu,
            "rows_per_s": n / (wall - 2.0)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "ingest.json")
    args = parser.parse_args()
    n = args.rows
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="dts-bench-ingest-") as tmp, EmbeddedBroker() as broker:
        warehouse = str(Path(tmp) / "warehouse")
        os.makedirs(warehouse)
        topic = f"shop.shop.orders.{uuid.uuid4().hex[:6]}"
        print(f"-- source: {n:,} Debezium MySQL events on {topic} ...", flush=True)
        print(f"   produced in {produce_source(broker.bootstrap, topic, n):.1f}s", flush=True)
        steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [
            ("raw confluent-kafka consume",
             lambda: raw_consume(broker.bootstrap, topic, PARTITIONS, n, FETCH_BYTES)),
            ("raw confluent-kafka copy",
             lambda: bench_raw_copy(broker.bootstrap, topic, n, broker.pid)),
            ("dts ingest (Ingestor)",
             lambda: bench_ingestor(broker.bootstrap, warehouse, topic, n, broker.pid)),
            ("dts ingest (CLI)", lambda: bench_cli(broker.bootstrap, warehouse, topic, n)),
        ]  # fmt: skip
        for name, step in steps:
            print(f"-- {name} ...", flush=True)
            results[name] = r = step()
            print(f"   {r['rows_per_s']:,.0f} records/s", flush=True)
    report(results)
    save_results(args.out, results)


def report(results: dict[str, Any]) -> None:
    raw = results["raw confluent-kafka consume"]["rows_per_s"]
    raw_rows = results["raw confluent-kafka consume"]["rows"]
    print(f"\n{'what':30} {'records/s':>12} {'vs raw':>7} {'start-up s':>11}")
    for name, r in results.items():
        startup = r.get("startup_s")
        shown = f"{startup:11.2f}" if startup is not None else f"{'':11}"
        print(f"{name:30} {r['rows_per_s']:12,.0f} {r['rows_per_s'] / raw:7.2f} {shown}")
    ingest = results["dts ingest (Ingestor)"]
    print(f"\ningest CPU per 1M records: {ingest['cpu_s'] / ingest['rows'] * 1e6:.1f}s (python) + "
          f"{ingest['broker_cpu_s'] / ingest['rows'] * 1e6:.1f}s (broker); raw consume "
          f"{results['raw confluent-kafka consume']['cpu_s'] / raw_rows * 1e6:.1f}s; "
          f"2-core bound {ingest['bound_rows_per_s']:,.0f} records/s = "
          f"{ingest['bound_rows_per_s'] / raw:.2f}x raw")  # fmt: skip
    copy = results["raw confluent-kafka copy"]
    print(f"raw copy (no decode) CPU per 1M records: {copy['cpu_s'] / copy['rows'] * 1e6:.1f}s "
          f"(python) + {copy['broker_cpu_s'] / copy['rows'] * 1e6:.1f}s (broker); 2-core bound "
          f"{copy['bound_rows_per_s']:,.0f} records/s = {copy['bound_rows_per_s'] / raw:.2f}x "
          "raw consume: what any ingest that re-writes every record can reach here")  # fmt: skip
    print(f"dts ingest / raw consume: {ingest['rows_per_s'] / raw:.2f} (target >= 0.70); "
          f"start-up {ingest['startup_s']:.2f}s in process, "
          f"{results['dts ingest (CLI)']['startup_s']:.2f}s as a command (target < 2 s); "
          f"load average {os.getloadavg()[0]:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
