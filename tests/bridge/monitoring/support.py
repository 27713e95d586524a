"""Support for the monitoring tests: the PromQL expressions the monitoring config holds
(dashboard panels, variables, alerts), a stand-in for the FileStore API the exporter reads
(unit tests of its arithmetic; real-path tests use the real ``filestore.Catalog``, see
test_exporter.py), and the live components whose /metrics the tests scrape (each
``start_*`` is a context manager yielding ``host:port`` and stopping what it started).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

# ---- PromQL expressions of the monitoring config -----------------------------

MONITORING = Path(__file__).resolve().parents[3] / "monitoring"
DASHBOARDS = sorted((MONITORING / "grafana" / "dashboards").glob("*.json"))

# Grafana's variables, replaced by what Grafana would send when "All" tables are selected.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "5m",
    "${table}": ".*",
    "$table": ".*",
    "${group}": ".*",
    "$group": ".*",
}
_METRIC = re.compile(r"\bdts_[a-z0-9_]+\b")
_LABEL_VALUES = re.compile(r"^label_values\((?P<metric>[^,]+),\s*(?P<label>\w+)\)$")
# An alert is `<signal> <op> <number>` (see monitoring/alerts.yml).
_ALERT = re.compile(
    r"^(?P<signal>.+?)\s*(?P<op>>=|<=|==|!=|>|<)\s*(?P<threshold>[0-9.eE+-]+)$", re.S
)


@dataclass(frozen=True)
class Expr:
    where: str  # e.g. "storage.json: Sorted runs per bucket [A]"
    promql: str
    # An alert's full expr is empty while nothing is wrong; its signal must have data.
    needs_data: bool = True

    def __str__(self) -> str:
        return self.where


def grafana_to_promql(expr: str) -> str:
    for var, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(var, value)
    return expr


def _panels(panels: list[dict]) -> list[dict]:  # type: ignore[type-arg]
    out = []
    for p in panels:
        out.append(p)
        out.extend(_panels(p.get("panels", [])))
    return out


def dashboard_expressions() -> list[Expr]:
    exprs = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for panel in _panels(board["panels"]):
            for target in panel.get("targets", []):
                where = f"{path.name}: {panel['title']} [{target['refId']}]"
                exprs.append(Expr(where, grafana_to_promql(target["expr"])))
        for var in board.get("templating", {}).get("list", []):
            if var.get("type") != "query":
                continue
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            match = _LABEL_VALUES.match(query.strip())
            assert match, f"{path.name}: variable {var['name']}: only label_values(m, l) is used"
            # label_values(m, l) has data iff some series of m carries label l.
            promql = f"group by ({match['label']}) ({match['metric']})"
            exprs.append(Expr(f"{path.name}: variable ${var['name']}", promql))
    return exprs


def alert_rules() -> list[dict]:  # type: ignore[type-arg]
    doc = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def alert_signal(expr: str) -> str:
    """The left side of an alert's final comparison: the series the threshold applies to."""
    match = _ALERT.match(expr.strip())
    if match is None:
        raise ValueError(f"alert expr is not `<signal> <op> <number>`: {expr!r}")
    return match["signal"]


def alert_expressions() -> list[Expr]:
    exprs = []
    for rule in alert_rules():
        exprs.append(Expr(f"alert {rule['alert']}", rule["expr"], needs_data=False))
        exprs.append(Expr(f"alert {rule['alert']} (signal)", alert_signal(rule["expr"])))
    return exprs


def all_expressions() -> list[Expr]:
    return dashboard_expressions() + alert_expressions()


def metric_names(promql: str) -> set[str]:
    return set(_METRIC.findall(promql))


# ---- a stand-in FileStore for the exporter's unit tests ----------------------


@dataclass(frozen=True)
class FakeFile:
    level: int
    file_size: int


@dataclass(frozen=True)
class FakeSplit:
    partition: dict[str, Any]
    bucket: int
    files: list[FakeFile]


@dataclass(frozen=True)
class FakeSnapshot:
    id: int
    barrier: int | None
    total_record_count: int | None = 0


@dataclass(frozen=True)
class FakeSchema:
    primary_key: list[str]


@dataclass(frozen=True)
class FakeOptions:
    num_sorted_run_stop_trigger: int = 10
    barrier_interval_ms: int = 1000


@dataclass
class FakeTable:
    name: str
    schema: FakeSchema
    options: FakeOptions = field(default_factory=FakeOptions)
    history: list[tuple[FakeSnapshot, list[FakeSplit]]] = field(default_factory=list)
    scans: int = 0

    def latest_snapshot(self) -> FakeSnapshot | None:
        return self.history[-1][0] if self.history else None

    def snapshot(self, snapshot_id: int) -> FakeSnapshot:
        for snap, _ in self.history:
            if snap.id == snapshot_id:
                return snap
        raise KeyError(snapshot_id)

    def new_scan(self, snapshot_id: int | None = None) -> FakeScan:
        self.scans += 1
        for snap, splits in self.history:
            if snap.id == snapshot_id:
                return FakeScan(splits)
        raise KeyError(snapshot_id)


@dataclass
class FakeScan:
    splits: list[FakeSplit]

    def plan(self) -> list[FakeSplit]:
        return self.splits


@dataclass
class FakeCatalog:
    """Tables by name; writes snapshot-<N> files where the layout says they live."""

    warehouse: Path
    tables: dict[str, FakeTable] = field(default_factory=dict)
    broken: set[str] = field(default_factory=set)

    def list_tables(self, db: str | None = None) -> list[str]:
        return sorted(set(self.tables) | self.broken)

    def get_table(self, name: str) -> FakeTable:
        if name in self.broken:
            raise RuntimeError(f"schema of {name} is unreadable")
        return self.tables[name]

    def add(self, table: FakeTable) -> FakeTable:
        self.tables[table.name] = table
        return table

    def commit(self, name: str, snapshot: FakeSnapshot, splits: list[FakeSplit]) -> None:
        self.tables[name].history.append((snapshot, splits))
        db, _, tbl = name.partition(".")
        snap_dir = self.warehouse / f"{db}.db" / tbl / "snapshot"
        snap_dir.mkdir(parents=True, exist_ok=True)
        (snap_dir / f"snapshot-{snapshot.id}").write_text("{}")


# ---- live components ---------------------------------------------------------

START_TIMEOUT_S = 30
# A consumer group's first assignment takes ~20 s on the embedded broker.
WORKER_READY_TIMEOUT_S = 90
WORKER_READY_SERIES = (
    "dts_worker_barrier_last_committed_id",
    "dts_worker_dlq_records_total",
    "dts_worker_consumer_lag_records",
    "dts_worker_consumer_lag_ms",
)
_ADDRESS = re.compile(r"http://(127\.0\.0\.1:\d+)/metrics")


def populate_warehouse(warehouse: Path) -> None:
    """Real tables such that every FileStore series the dashboards use has data and every
    FileStore alert fires: a 2-bucket primary-key table at its stop trigger, a table with a
    stale barrier, a compacted table with expired snapshots, a table with an unreadable
    snapshot, and an append table whose Iceberg metadata is missing."""
    from unittest import mock

    from filestore import Catalog
    from filestore.iceberg import IcebergSync

    catalog = Catalog(str(warehouse))
    catalog.create_database("shop")
    orders = catalog.create_table(
        "shop.orders",
        pa.schema([("id", pa.int64()), ("amount", pa.float64())]),
        primary_key=["id"],
        options={
            "bucket": "2",
            "num-sorted-run.compaction-trigger": "3",
            "num-sorted-run.stop-trigger": "3",
            # Keep the three runs (no compaction after commit): the state the alert watches.
            "auto-compaction": "false",
            "barrier.interval": "1 s",
        },
    )
    now_ms = time.time_ns() // 1_000_000
    for i in range(3):  # three level-0 runs per bucket: at the stop trigger
        w = orders.new_write("monitoring-test")
        w.write(pa.table({"id": pa.array(range(i, i + 20), pa.int64()), "amount": [1.5] * 20}))
        w.commit(barrier=now_ms - (3 - i) * 1000, log_offsets={0: 10 * i, 1: 10 * i})
        w.close()
    # A table whose last barrier is two minutes old: the barrier alert fires for it.
    stale = catalog.create_table("shop.stale", pa.schema([("id", pa.int64())]), primary_key=["id"])
    w = stale.new_write("monitoring-test")
    w.write(pa.table({"id": pa.array([1], pa.int64())}))
    w.commit(barrier=now_ms - 120_000)
    w.close()
    # A table whose latest snapshot file got corrupted: the exporter counts errors for it
    # (and the alert on them fires) while it keeps reporting the other tables.
    broken = catalog.create_table("shop.broken", pa.schema([("id", pa.int64())]))
    w = broken.new_write("monitoring-test")
    w.write(pa.table({"id": pa.array([1], pa.int64())}))
    snapshot = w.commit(barrier=now_ms)
    w.close()
    (warehouse / "shop.db" / "broken" / "snapshot" / f"snapshot-{snapshot.id}").write_text("{")
    # A compacted table with expired snapshots: three commits, one full compaction, then
    # all but the newest two snapshots expired (snapshots 3 and 4 = the COMPACT one remain).
    compacted = catalog.create_table(
        "shop.compacted",
        pa.schema([("id", pa.int64()), ("v", pa.int64())]),
        primary_key=["id"],
        options={"auto-compaction": "false"},
    )
    for i in range(3):
        w = compacted.new_write("monitoring-test")
        w.write(pa.table({"id": pa.array(range(10), pa.int64()), "v": [i] * 10}))
        w.commit(barrier=now_ms - (3 - i) * 1000)
        w.close()
    compacted.compact(full=True)
    compacted.expire(retain_min=1, retain_max=2)
    # An append table whose Iceberg metadata could not be written (the commit stands):
    # Iceberg readers would see nothing, and the alert on it fires.
    events = catalog.create_table(
        "shop.events",
        pa.schema([("v", pa.string())]),
        options={"metadata.iceberg.storage": "table-location"},
    )
    w = events.new_write("monitoring-test")
    w.write(pa.table({"v": ["a", "b"]}))
    with mock.patch.object(IcebergSync, "sync", side_effect=OSError(28, "No space left")):
        w.commit(barrier=now_ms)
    w.close()


STUCK_TABLE = "shop.stuck"


def _stuck_table(warehouse: Path) -> str:
    """A table with a log whose latest snapshot file got corrupted: the worker cannot
    resume it, retries, and reports it stalled (the stall alert fires for it)."""
    from filestore import Catalog

    catalog = Catalog(str(warehouse))
    table = catalog.create_table(
        STUCK_TABLE, pa.schema([("id", pa.int64())]), primary_key=["id"], options={"bucket": "1"}
    )
    w = table.new_write("monitoring-test")
    w.write(pa.table({"id": pa.array([1], pa.int64())}))
    snapshot = w.commit(barrier=int(time.time() * 1000))
    w.close()
    (warehouse / "shop.db" / "stuck" / "snapshot" / f"snapshot-{snapshot.id}").write_text("{")
    return STUCK_TABLE


@contextmanager
def start_exporter(warehouse: Path) -> Iterator[str]:
    """``dts exporter`` in a subprocess over a populated warehouse."""
    populate_warehouse(warehouse)
    cmd = [
        sys.executable,
        "-c",
        "from bridge.commands.exporter import exporter; exporter()",
        "--warehouse",
        str(warehouse),
        "--port",
        "0",
    ]
    with _process(cmd, warehouse.parent / "exporter.log") as address:
        yield address


# The MetaService's lineage in the live stack: orders -> order_totals -> daily_revenue and
# orders -> orders_by_customer, one group named after its root, shop.orders.
META_GROUP = "shop.orders"
META_JOBS = {
    "monitoring-cdc": ([], ["shop.orders"]),
    "monitoring-totals": (["shop.orders"], ["shop.order_totals"]),
    "monitoring-revenue": (["shop.order_totals"], ["shop.daily_revenue"]),
    "monitoring-by-customer": (["shop.orders"], ["shop.orders_by_customer"]),
}
META_TABLES = [t for _, sinks in META_JOBS.values() for t in sinks]
# daily_revenue stopped 2 minutes ago: the group's consistent reads lag (the alert fires).
META_STALLED = "shop.daily_revenue"
META_STALL_MS = 120_000


def populate_meta(url: str) -> None:
    """Jobs with lineage and completed barriers, so every MetaService series has data."""
    from bridge.meta.client import MetaClient
    from bridge.meta.models import TableBarrierReport

    now_ms = time.time_ns() // 1_000_000
    barriers = [now_ms - META_STALL_MS - 10_000 + i * 5_000 for i in range(27)]
    with MetaClient(url) as client:
        for job_id, (sources, sinks) in META_JOBS.items():
            kind = "worker" if not sources else "spark-streaming"
            # A day-long timeout: these jobs stay running while the tests look at them.
            client.register_job(
                kind, sources, sinks, job_id=job_id, heartbeat_timeout_ms=86_400_000
            )
        reports = [
            TableBarrierReport(table=table, barrier=b, snapshot_id=i + 1, job_id=job_id)
            for job_id, (_, sinks) in META_JOBS.items()
            for table in sinks
            for i, b in enumerate(barriers)
            if table != META_STALLED or b <= now_ms - META_STALL_MS
        ]
        client.report_barriers(reports)
        client.heartbeat("monitoring-cdc")  # a route or two in the request counter
        client.consistent_version(list(META_TABLES))


@contextmanager
def start_meta(warehouse: Path) -> Iterator[str]:
    """``dts meta serve`` in a subprocess on the warehouse's embedded database, populated."""
    cmd = [
        sys.executable,
        "-m",
        "bridge",
        "meta",
        "serve",
        "--warehouse",
        str(warehouse),
        "--port",
        "0",
    ]
    with _process(cmd, warehouse.parent / "meta.log") as address:
        populate_meta(f"http://{address}")
        yield address


@contextmanager
def _process(cmd: list[str], log_path: Path) -> Iterator[str]:
    """Run ``cmd``, wait for it to print its /metrics address, stop it afterwards."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield _wait_for_address(proc, log_path)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_for_address(proc: subprocess.Popen[bytes], log_path: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        match = _ADDRESS.search(log_path.read_text(errors="replace"))
        if match:
            return match.group(1)
        if proc.poll() is not None:
            raise RuntimeError(
                f"{proc.args} exited with {proc.returncode}:\n{log_path.read_text()[-2000:]}"
            )
        time.sleep(0.1)
    raise TimeoutError(f"no /metrics address after {START_TIMEOUT_S}s; see {log_path}")


@contextmanager
def start_worker(warehouse: Path, bootstrap: str) -> Iterator[str]:
    """``dts worker`` on a 4-bucket table fed 5 barriers of changes and one undecodable
    record (so the DLQ counter moves); yields once it has committed and dead-lettered."""
    import httpx
    from confluent_kafka import Producer

    from bridge.tables import log_spec_for
    from tests.bridge.worker.support import Changelog, create_table, log_writer, produce
    from tests.bridge.worker.support import start_worker as start_worker_proc

    table = create_table(warehouse, buckets=4)
    stuck = _stuck_table(warehouse)
    writer = log_writer(table, bootstrap)
    changes = Changelog()
    produce(writer, changes, barriers=3, rows_per_barrier=50)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(log_spec_for(table).topic, key=b'{"id": 1}', value=b"not json", partition=0)
    producer.flush(10)
    produce(writer, changes, barriers=2, rows_per_barrier=50)
    writer.close()
    worker = start_worker_proc(
        warehouse, bootstrap, [table.name, stuck], "dts-monitoring", warehouse.parent
    )
    address = f"127.0.0.1:{worker.web_port}"
    try:
        deadline = time.monotonic() + WORKER_READY_TIMEOUT_S
        while True:
            if worker.proc.poll() is not None:
                raise RuntimeError(f"dts worker exited:\n{worker.output()[-2000:]}")
            try:
                text = httpx.get(f"http://{address}/metrics", timeout=5).text
            except httpx.HTTPError:
                text = ""
            if all(f"{m}{{" in text for m in WORKER_READY_SERIES):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker not ready in time; log {worker.log_path}")
            time.sleep(0.5)
        yield address
    finally:
        worker.stop()
