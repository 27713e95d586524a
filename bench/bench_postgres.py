"""A real database into dts (issue 41): does dts keep up with what Debezium's connector
writes, and what does a user's first real run take?

Everything as a user runs it, on this machine: the embedded broker, PostgreSQL
(``wal_level=logical``), Kafka Connect with Debezium's PostgreSQL connector (the settings
``dts connect postgres`` gives it), then ``dts ingest --topic-prefix`` and ``dts worker``
as commands in their own processes, all started at once.

1. **Initial snapshot**: ``items`` holds ``--rows`` rows (``bigint`` key, ``integer``,
   ``numeric(12,2)``, ``text``, ``timestamptz``) before the connector starts. Sampled every
   half second: the rows the connector has written to Kafka, the rows the ingest has
   committed to the table's log, the log records the worker has committed to the table.
   Printed: the connector's rate, how far the ingest and the worker stay behind it, when
   the first rows are readable in dts and when the whole table is.
2. **Streaming** for ``--stream-seconds``: one connection commits transactions as fast
   as it can (each updates 10 rows and inserts one). Printed: what PostgreSQL wrote and
   what the connector delivered a second, how long the connector took to drain after the
   writer stopped, the ingest's lag behind the connector (records and seconds: p50, p99,
   max) and how long dts took after the connector's last event; each process's CPU share
   and CPU per event. The headroom: the events a second the ingest could take on one core
   at its CPU cost per event, over the connector's rate.

Usage: python -m bench.bench_postgres --rows 1000000 --stream-seconds 60
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, TopicPartition

from bench.bench_worker import cpu_seconds
from bench.postgres_server import postgres_server
from bench.results import save_results
from filestore import Catalog, Table
from logstore.broker import EmbeddedBroker
from logstore.connect import ConnectWorker, postgres_connector
from logstore.topics import create_topic

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("account", pa.int32()),
        ("amount", pa.decimal128(12, 2)),
        ("note", pa.string()),
        ("at", pa.timestamp("us", tz="UTC")),
    ]
)
DDL = """
CREATE TABLE items (
    id bigint PRIMARY KEY, account integer, amount numeric(12, 2), note text, at timestamptz
);
INSERT INTO items
SELECT g, g % 1000, (g % 100000) / 100.0, 'item ' || g, now() FROM generate_series(1, %d) g;
"""
SAMPLE_S = 0.5


@dataclass
class Sample:
    t: float  # seconds since the parts started
    source: int  # records the connector has written to the table's topic
    ingested: int  # of those, committed by the ingest to the table's log
    log_end: int  # the table's log: records (and markers) written
    committed: int  # of those, committed by the worker to the table


@dataclass
class Probe:
    """Reads where each stage stands, without joining any group."""

    bootstrap: str
    source_topic: str
    group: str
    table: Table
    log_topic: str
    buckets: int
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._c = Consumer(
            {"bootstrap.servers": self.bootstrap, "group.id": self.group, "log_level": 3}
        )

    def sample(self, t: float) -> Sample:
        src = TopicPartition(self.source_topic, 0)
        _, source = self._c.get_watermark_offsets(src, timeout=10)
        (done,) = self._c.committed([src], timeout=10)
        try:
            self._c.list_topics(self.log_topic, timeout=10)  # the ingest makes it: refresh
            log_end = sum(
                self._c.get_watermark_offsets(TopicPartition(self.log_topic, p), timeout=10)[1]
                for p in range(self.buckets)
            )
        except KafkaException:  # the ingest has not made the table's log yet
            log_end = 0
        snap = self.table.latest_snapshot()
        committed = sum((snap.log_offsets or {}).values()) if snap is not None else 0
        s = Sample(t, int(source), max(0, int(done.offset)), int(log_end), int(committed))
        self.samples.append(s)
        return s

    def close(self) -> None:
        self._c.close()


def _cpu(pids: dict[str, int]) -> dict[str, float]:
    out = {}
    for name, pid in pids.items():
        try:
            out[name] = cpu_seconds(pid)
        except OSError:
            out[name] = float("nan")
    return out


def _descendants_cpu(root: int) -> float:
    """CPU seconds of ``root``'s descendants (PostgreSQL's postmaster and its children:
    the backends, the WAL sender that decodes for Debezium)."""
    parent: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                parent[int(proc.name)] = int(stat[1])
            except OSError:
                continue
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        for child, ppid in parent.items():
            if ppid == pid:
                todo.append(child)
                try:
                    total += cpu_seconds(child)
                except OSError:
                    continue
    return total


def _writer(url: str, stop: threading.Event, first_id: int, counts: list[int]) -> None:
    """Transactions as fast as one connection goes: 10 updates and an insert each."""
    import psycopg

    rnd = random.Random(3)
    next_id = first_id
    with psycopg.connect(url, autocommit=False) as conn:
        while not stop.is_set():
            with conn.cursor() as cur:
                ids = [rnd.randrange(1, first_id) for _ in range(10)]
                cur.execute(
                    "UPDATE items SET amount = amount + 1, at = now() WHERE id = ANY(%s)", (ids,)
                )
                cur.execute("INSERT INTO items VALUES (%s, 1, 1.00, 'new', now())", (next_id,))
            conn.commit()
            next_id += 1
            counts[0] += 11


def _table_caught_up(s: Sample, buckets: int) -> bool:
    """The worker has committed the whole log: after the last barrier each partition
    holds only the Kafka transaction's commit marker (one offset)."""
    return s.log_end > 0 and s.log_end - s.committed <= buckets


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _start(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env)


def run(rows: int, stream_s: float) -> dict[str, Any]:
    results: dict[str, Any] = {"rows": rows}
    with (
        tempfile.TemporaryDirectory(prefix="dts-bench-pg-") as tmp,
        EmbeddedBroker() as broker,
        postgres_server(logical=True) as pg,
    ):
        import psycopg

        t = time.monotonic()
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute(DDL.replace("%d", str(rows)))
        results["load_s"] = time.monotonic() - t
        print(f"-- PostgreSQL: {rows:,} rows loaded in {results['load_s']:.1f}s", flush=True)
        warehouse = Path(tmp) / "warehouse"
        table = Catalog(str(warehouse)).create_table(
            "bench.items", SCHEMA, primary_key=["id"], options={"bucket": "4"}
        )
        prefix = f"bench{uuid.uuid4().hex[:6]}"
        for topic in ("public.items", "transaction"):
            create_topic(broker.bootstrap, f"{prefix}.{topic}", 1, {})
        connector = postgres_connector(
            "bench-pg",
            host="127.0.0.1",
            port=pg.port,
            user="postgres",
            dbname="postgres",
            tables=["public.items"],
            topic_prefix=prefix,
        )
        env = {**os.environ, "DTS_WAREHOUSE": str(warehouse), "DTS_BOOTSTRAP": broker.bootstrap}
        dts = [sys.executable, "-m", "bridge"]
        probe = Probe(
            broker.bootstrap,
            f"{prefix}.public.items",
            f"dts-ingest-{prefix}",
            table,
            table.options.log_topic(table.name),
            4,
        )
        started = time.monotonic()
        with ConnectWorker(broker.bootstrap, connector, work_dir=Path(tmp) / "connect") as connect:
            ingest = _start(
                [*dts, "ingest", "--topic-prefix", prefix, "--tables", "public.items=bench.items"],
                Path(tmp) / "ingest.log",
                env,
            )
            worker = _start(
                [*dts, "worker", "--tables", "bench.items", "--web-port", "0"],
                Path(tmp) / "worker.log",
                env,
            )
            assert connect.pid is not None
            pids = {
                "connect": connect.pid,
                "ingest": ingest.pid,
                "worker": worker.pid,
                "broker": int(broker.pid or 0),
            }
            try:
                assert pg.proc is not None
                server = pg.proc.pid
                results |= _snapshot_phase(probe, rows, started, pids, server, tmp)
                results |= _stream_phase(probe, pg.url, rows, stream_s, started, pids, server)
            finally:
                for proc in (ingest, worker):
                    proc.send_signal(2)
                    try:
                        proc.wait(timeout=60)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                probe.close()
    results["load_average"] = os.getloadavg()[0]
    return results


def _snapshot_phase(
    probe: Probe, rows: int, started: float, pids: dict[str, int], server: int, tmp: str
) -> dict[str, Any]:
    print("-- initial snapshot: connector, ingest, worker (every 0.5 s) ...", flush=True)
    cpu0, pg0 = _cpu(pids), _descendants_cpu(server)
    first_rows = source_done = ingest_done = None
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        s = probe.sample(time.monotonic() - started)
        if first_rows is None and s.committed > 0:
            first_rows = s.t
        if source_done is None and s.source >= rows:
            source_done = s.t
        if ingest_done is None and s.ingested >= rows:
            ingest_done = s.t
        if ingest_done is not None and _table_caught_up(s, probe.buckets):
            break
        if len(probe.samples) % 20 == 0:
            print(f"   {s.t:6.1f}s  connector {s.source:>10,}  ingest {s.ingested:>10,}  "
                  f"worker {s.committed:>10,} of {s.log_end:,}", flush=True)  # fmt: skip
        time.sleep(SAMPLE_S)
    else:
        raise RuntimeError(f"the snapshot did not reach the table; see {tmp}")
    table_done = probe.samples[-1].t
    cpu1 = _cpu(pids)
    assert source_done is not None and ingest_done is not None
    first_source = next(s.t for s in probe.samples if s.source > 0)
    wall = table_done - first_source
    cpu = {k: cpu1[k] - cpu0[k] for k in pids} | {"postgres": _descendants_cpu(server) - pg0}
    out = {
        "first_rows_in_dts_s": first_rows,
        "connector_snapshot_rows_per_s": rows / (source_done - first_source),
        "ingest_done_after_connector_s": ingest_done - source_done,
        "table_done_s": table_done,
        "table_done_after_connector_s": table_done - source_done,
        "max_ingest_lag_records": max(s.source - s.ingested for s in probe.samples),
        "snapshot_cpu_share": {k: v / wall for k, v in cpu.items()},
        "snapshot_cpu_us_per_event": {k: 1e6 * v / rows for k, v in cpu.items()},
    }
    print(f"   first rows readable in dts {first_rows:.1f}s after start; the connector wrote "
          f"{rows:,} rows at {out['connector_snapshot_rows_per_s']:,.0f}/s; the ingest was "
          f"done {out['ingest_done_after_connector_s']:.1f}s and the table "
          f"{out['table_done_after_connector_s']:.1f}s after it", flush=True)  # fmt: skip
    return out


def _stream_phase(
    probe: Probe,
    url: str,
    rows: int,
    seconds: float,
    started: float,
    pids: dict[str, int],
    server: int,
) -> dict[str, Any]:
    print(f"-- streaming {seconds:.0f}s: one connection as fast as it goes ...", flush=True)
    stop, counts = threading.Event(), [0]
    writer = threading.Thread(target=_writer, args=(url, stop, rows + 1, counts))
    begin = len(probe.samples)
    cpu0, pg0 = _cpu(pids), _descendants_cpu(server)
    t0 = time.monotonic()
    writer.start()
    try:
        while time.monotonic() - t0 < seconds:
            probe.sample(time.monotonic() - started)
            time.sleep(SAMPLE_S)
    finally:
        stop.set()
        writer.join(timeout=60)
    wall = time.monotonic() - t0
    cpu1 = _cpu(pids)
    cpu = {k: cpu1[k] - cpu0[k] for k in pids} | {"postgres": _descendants_cpu(server) - pg0}
    window = probe.samples[begin:]
    delivered = window[-1].source - window[0].source  # by the connector, in the window
    stopped = time.monotonic() - started
    deadline = time.monotonic() + 900
    final_t = stopped  # when the connector delivered its last event
    while time.monotonic() < deadline:  # until the connector, the ingest, the table are done
        s = probe.sample(time.monotonic() - started)
        if s.source > probe.samples[-2].source:
            final_t = s.t
        if s.t - final_t > 5 and s.ingested >= s.source and _table_caught_up(s, probe.buckets):
            break
        time.sleep(SAMPLE_S)
    caught = next(
        x.t
        for x in probe.samples[begin:]
        if x.t >= final_t and x.ingested >= x.source and _table_caught_up(x, probe.buckets)
    )
    rate = delivered / wall
    lags = [float(x.source - x.ingested) for x in probe.samples[begin:]]
    p50, p99 = _percentile(lags, 0.5), _percentile(lags, 0.99)
    out = {
        "stream_postgres_events_per_s": counts[0] / wall,
        "stream_connector_events_per_s": rate,
        "stream_connector_drain_s": final_t - stopped,
        "stream_dts_after_connector_s": caught - final_t,
        "stream_ingest_lag_records": {"p50": p50, "p99": p99, "max": max(lags)},
        "stream_ingest_lag_s_p99": p99 / rate if rate else float("nan"),
        "stream_cpu_share": {k: v / wall for k, v in cpu.items()},
        "stream_cpu_us_per_event": {k: 1e6 * v / max(1, delivered) for k, v in cpu.items()},
        # events a second the ingest could take on one core at its CPU cost per event
        "stream_ingest_capacity_per_s": delivered / cpu["ingest"],
    }
    print(f"   PostgreSQL {out['stream_postgres_events_per_s']:,.0f} events/s, the connector "
          f"delivered {rate:,.0f}/s; ingest lag p50 {p50:,.0f} p99 {p99:,.0f} records; the "
          f"connector drained {final_t - stopped:.1f}s after the writer stopped, dts "
          f"{caught - final_t:.1f}s after the connector", flush=True)  # fmt: skip
    return out


def report(r: dict[str, Any]) -> None:
    headroom = r["stream_ingest_capacity_per_s"] / r["stream_connector_events_per_s"]
    print(f"\nload {r['rows']:,} rows into PostgreSQL: {r['load_s']:.1f}s")
    print(f"first rows readable in dts: {r['first_rows_in_dts_s']:.1f}s after the parts "
          f"started; the whole table: {r['table_done_s']:.1f}s")  # fmt: skip
    print(f"initial snapshot: connector {r['connector_snapshot_rows_per_s']:,.0f} rows/s; "
          f"the table complete {r['table_done_after_connector_s']:.1f}s after the connector; "
          f"max ingest lag {r['max_ingest_lag_records']:,} records")  # fmt: skip
    print(f"streaming: PostgreSQL {r['stream_postgres_events_per_s']:,.0f} events/s, the "
          f"connector {r['stream_connector_events_per_s']:,.0f}/s (drained "
          f"{r['stream_connector_drain_s']:.1f}s after the writer stopped); ingest lag behind "
          f"the connector p99 {r['stream_ingest_lag_records']['p99']:,.0f} records "
          f"(~{r['stream_ingest_lag_s_p99']:.2f}s); dts done "
          f"{r['stream_dts_after_connector_s']:.1f}s after the connector")  # fmt: skip
    print(f"headroom: the ingest's CPU per event gives {r['stream_ingest_capacity_per_s']:,.0f} "
          f"events/s on one core = {headroom:.1f}x the connector's rate")  # fmt: skip
    for phase in ("snapshot", "stream"):
        shares = ", ".join(f"{k} {v:.2f}" for k, v in r[f"{phase}_cpu_share"].items())
        per = ", ".join(f"{k} {v:.0f}" for k, v in r[f"{phase}_cpu_us_per_event"].items())
        print(f"{phase}: CPU cores used: {shares}; CPU us per event: {per}")
    print(f"load average {r['load_average']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--stream-seconds", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "postgres.json")
    args = parser.parse_args()
    results = run(args.rows, args.stream_seconds)
    report(results)
    save_results(args.out, results)


if __name__ == "__main__":
    main()
