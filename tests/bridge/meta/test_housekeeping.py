"""The MetaService's housekeeping keeps the newest barriers per table, again and again."""

from __future__ import annotations

import time
from pathlib import Path

from bridge.meta.client import MetaClient
from bridge.meta.models import TableBarrierReport
from bridge.meta.store import Store
from tests.bridge.support import RunningServer


def _report(client: MetaClient, barriers: range) -> None:
    client.report_barriers(
        [TableBarrierReport(table="db.t", barrier=b, snapshot_id=b, job_id="w") for b in barriers]
    )


def _wait_kept(client: MetaClient, newest: list[int]) -> None:
    until = time.monotonic() + 30
    while [r.barrier for r in client.barriers("db.t")] != newest and time.monotonic() < until:
        time.sleep(0.05)
    assert [r.barrier for r in client.barriers("db.t")] == newest


def test_barriers_are_pruned_to_the_newest_on_a_clock(warehouse: Path) -> None:
    store = Store.for_warehouse(warehouse, heartbeat_timeout_ms=60_000)
    try:
        running = RunningServer(store, sweep_interval_s=0.05, prune_keep=3, prune_interval_s=0.2)
        with running, MetaClient(running.url) as client:
            client.register_job("spark-streaming", [], ["db.t"], job_id="w")
            _report(client, range(1, 11))
            _wait_kept(client, [10, 9, 8])
            _report(client, range(11, 16))  # pruned again, not only at start
            _wait_kept(client, [15, 14, 13])
    finally:
        store.close()
