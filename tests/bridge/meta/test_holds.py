"""Expiration holds for consistent versions (bridge.meta.holds): the MetaService keeps, on
each table a strong read across tables may include, the snapshot of the barrier its
barrier domain last completed together, so a lagging table never makes another table's
snapshot of that barrier expire under the read."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from bridge.consistency_read import consistent_read_tables
from bridge.meta.client import MetaClient
from bridge.meta.consistency import BarrierPoint
from bridge.meta.holds import HOLD_CONSUMER, ConsistentHolds
from bridge.meta.models import JobKind, JobSpec, TableBarrierReport
from bridge.meta.store import Store
from filestore import Catalog
from tests.bridge.support import RunningServer

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])


def _commit(catalog: Catalog, name: str, barrier: int, value: int) -> int:
    w = catalog.get_table(name).new_write(f"writer-{name}")
    try:
        w.write(pa.table({"id": [1, 2], "v": [value, value]}, schema=SCHEMA))
        return int(w.commit(barrier=barrier).id)
    finally:
        w.close()


def _lineage(register: Callable[[JobSpec], object]) -> None:
    """orders -> enriched (joined with customers, another source), orders -> totals."""
    for job_id, sources, sink in (
        ("enrich", ["db.orders", "db.customers"], "db.enriched"),
        ("total", ["db.orders"], "db.totals"),
    ):
        register(JobSpec(job_id=job_id, kind=JobKind("spark-streaming"), sources=sources,
                         sinks=[sink]))  # fmt: skip


def _reports(table: str, barriers: list[int], snapshots: list[int]) -> list[TableBarrierReport]:
    return [
        TableBarrierReport(table=table, barrier=b, snapshot_id=s, job_id=None)
        for b, s in zip(barriers, snapshots, strict=True)
    ]


def _report(store: Store, table: str, barriers: list[int], snapshots: list[int]) -> None:
    store.report_barriers(_reports(table, barriers, snapshots))


def test_each_tables_point_is_its_barrier_domains_newest_common_barrier(store: Store) -> None:
    """orders and its two derived tables share orders' barriers; customers, joined in from
    another source, has barriers of its own and no point; a table of no lineage none."""
    _lineage(store.register_job)
    _report(store, "db.orders", [1000, 2000, 3000], [1, 2, 3])
    _report(store, "db.enriched", [1000, 2000, 3000], [4, 5, 6])
    _report(store, "db.totals", [1000, 2000], [7, 8])  # lags
    _report(store, "db.customers", [500, 1500], [1, 2])
    _report(store, "db.alone", [1000, 2000, 3000], [1, 2, 3])
    points = store.consistent_points()
    assert {t: p.snapshot_id if p else None for t, p in points.items()} == {
        "db.alone": None,
        "db.customers": None,
        "db.enriched": 5,
        "db.orders": 2,
        "db.totals": 8,
    }
    assert {p.barrier for p in points.values() if p} == {2000}


def test_a_hold_is_recorded_moved_and_released_only_when_its_point_changes(
    warehouse: Path,
) -> None:
    catalog = Catalog(str(warehouse))
    table = catalog.create_table("db.t", SCHEMA, primary_key=["id"])
    ids = [_commit(catalog, "db.t", b, b) for b in (1000, 2000, 3000)]
    holds = ConsistentHolds(catalog)
    at = {"db.t": BarrierPoint(2000, ids[1]), "db.elsewhere": BarrierPoint(2000, 9)}
    assert [(c.table, c.next_snapshot) for c in holds.apply(at)] == [("db.t", ids[1] + 1)]
    assert holds.apply(at) == []  # unchanged: not written again, its age kept
    (held,) = [c for c in table.consumers() if c.consumer_id == HOLD_CONSUMER]
    assert held.next_snapshot == ids[1] + 1
    # expiration keeps the held snapshot and everything after it
    table.expire(retain_min=1, older_than_ms=0)
    assert [s.id for s in table.snapshots()] == ids[1:]
    moved = holds.apply({"db.t": BarrierPoint(3000, ids[2])})
    assert [(c.table, c.next_snapshot) for c in moved] == [("db.t", ids[2] + 1)]
    released = holds.apply({"db.t": None})
    assert [(c.table, c.next_snapshot) for c in released] == [("db.t", None)]
    assert table.consumers() == [] and holds.apply({"db.t": None}) == []


def test_a_table_whose_hold_cannot_be_read_never_stops_the_others(
    warehouse: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """db.a's hold file is damaged: its hold is logged and passed over, and db.b's hold
    is still recorded in the same pass."""
    catalog = Catalog(str(warehouse))
    ids = {}
    for name in ("db.a", "db.b"):
        catalog.create_table(name, SCHEMA, primary_key=["id"])
        ids[name] = _commit(catalog, name, 1000, 1)
    damaged = catalog.get_table("db.a")
    damaged.record_consumer(HOLD_CONSUMER, ids["db.a"])
    Path(damaged.paths.consumer(HOLD_CONSUMER)).write_text("{not json")
    at = {name: BarrierPoint(1000, sid) for name, sid in ids.items()}
    with caplog.at_level(logging.WARNING, logger="bridge.meta.holds"):
        changes = ConsistentHolds(catalog).apply(at)
    assert [(c.table, c.next_snapshot) for c in changes] == [("db.b", ids["db.b"] + 1)]
    assert "consistent-version hold of db.a not moved" in caplog.text


def test_a_strong_read_survives_expiration_while_one_table_lags(warehouse: Path) -> None:
    """Through a real MetaService keeping holds: totals lags at 2000 while orders runs
    on and expires everything it may; the strong read of the two still finds orders'
    snapshot of 2000. When totals catches up, the hold moves on and frees it."""
    catalog = Catalog(str(warehouse))
    for name in ("db.orders", "db.totals"):
        catalog.create_table(name, SCHEMA, primary_key=["id"])
    orders = [_commit(catalog, "db.orders", b, b) for b in (1000, 2000, 3000, 4000)]
    totals = [_commit(catalog, "db.totals", b, b) for b in (1000, 2000)]
    store = Store.for_warehouse(warehouse, heartbeat_timeout_ms=60_000)
    holds = ConsistentHolds(catalog)
    try:
        with (
            RunningServer(store, sweep_interval_s=0.05, prune_interval_s=0.1, holds=holds) as srv,
            MetaClient(srv.url) as client,
        ):
            client.register_job("spark-streaming", ["db.orders"], ["db.totals"], job_id="total")
            client.report_barriers(
                _reports("db.orders", [1000, 2000, 3000, 4000], orders)
                + _reports("db.totals", [1000, 2000], totals)
            )
            _await_hold(catalog, "db.orders", orders[1] + 1)
            catalog.get_table("db.orders").expire(retain_min=1, older_than_ms=0)
            read = consistent_read_tables(catalog, ["db.orders", "db.totals"], meta_url=srv.url)
            assert read.version.barrier == 2000
            assert set(read["db.orders"].column("v").to_pylist()) == {2000}
            # totals catches up to 4000: the hold follows, and expiration may go on
            snap = _commit(catalog, "db.totals", 4000, 4000)
            client.report_barriers(_reports("db.totals", [4000], [snap]))
            _await_hold(catalog, "db.orders", orders[3] + 1)
            catalog.get_table("db.orders").expire(retain_min=1, older_than_ms=0)
            assert [s.id for s in catalog.get_table("db.orders").snapshots()] == [orders[3]]
    finally:
        store.close()


def _await_hold(catalog: Catalog, table: str, next_snapshot: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        held = {c.consumer_id: c.next_snapshot for c in catalog.get_table(table).consumers()}
        if held.get(HOLD_CONSUMER) == next_snapshot:
            return
        time.sleep(0.05)
    raise AssertionError(f"{table}: no hold at {next_snapshot} in 30 s: {held}")
