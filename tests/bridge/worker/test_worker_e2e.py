"""End to end: LogWriter -> embedded broker -> `dts worker` -> FileStore, against an oracle."""

from __future__ import annotations

import itertools
import json
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.bridge.worker.support import (
    Changelog,
    barrier_snapshots,
    create_table,
    latest_barrier,
    log_writer,
    produce,
    rows_at,
    start_worker,
    wait_for,
)

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize(
    "options",
    [{}, {"deletion-vectors.enabled": "true"}],
    ids=["merge-on-read", "deletion-vectors"],
)
def test_every_barrier_equals_the_oracle(broker, warehouse: Path, tmp_path: Path, options) -> None:  # type: ignore[no-untyped-def]
    table = create_table(warehouse, options=options)
    log = Changelog(seed=1)
    writer = log_writer(table, broker.bootstrap)
    barriers = produce(writer, log, barriers=3, rows_per_barrier=150)
    worker = start_worker(
        warehouse, broker.bootstrap, [table.name], f"g-{uuid.uuid4().hex[:8]}", tmp_path
    )
    try:
        wait_for(lambda: latest_barrier(table) == barriers[-1], 60, "first barriers", worker)
        # idle barriers (no rows) still complete, and the worker keeps up with new data
        barriers += produce(writer, log, barriers=1, rows_per_barrier=0)
        barriers += produce(writer, log, barriers=3, rows_per_barrier=150, pause_s=0.2)
        wait_for(lambda: latest_barrier(table) == barriers[-1], 30, "all barriers", worker)

        snaps = barrier_snapshots(table)
        assert sorted(snaps) == barriers  # one snapshot per barrier, in order
        for b in barriers:
            assert rows_at(table, b) == log.expected(b), f"barrier {b}"
        # each barrier's normalized changes are stored with its snapshot (the default
        # changelog-producer=auto): replayed, they give the next barrier's rows exactly
        ids = [snaps[b] for b in barriers]
        for prev, cur in itertools.pairwise(ids):
            assert table.changelog_files(prev, cur) is not None, (prev, cur)
            state = {r["id"]: r for r in table.read(snapshot_id=prev).to_pylist()}
            for r in table.changes(prev, cur).to_pylist():
                kind = r.pop("_row_kind")
                if kind in ("+I", "+U"):
                    state[r["id"]] = r
                else:
                    assert state.pop(r["id"]) == r, (kind, r)  # the exact old row
            assert state == {r["id"]: r for r in table.read(snapshot_id=cur).to_pylist()}
        last = table.latest_snapshot()
        assert last is not None and last.log_offsets is not None
        if options:  # the worker's commits marked what its upserts and deletes replaced
            snaps_ = table.snapshots()
            assert any(e.file.deletion_vector for s in snaps_ for e in table.live_entries(s))
        assert sorted(last.log_offsets) == [0, 1, 2, 3]

        base = f"http://127.0.0.1:{worker.web_port}"
        # lag comes from the bulk fetcher's view of the log end: 0 once everything is in
        wait_for(
            lambda: worker.table_status(table.name).get("lag_records") == 0, 15, "lag 0", worker
        )
        status = json.loads(urllib.request.urlopen(f"{base}/status", timeout=5).read())
        t = status["tables"][table.name]
        assert t["healthy"] is True and t["errors_total"] == 0
        assert all(b["high_watermark"] is not None for b in t["buckets"])
        assert t["last_barrier_committed"] == barriers[-1]
        assert t["last_barrier_seen"] == barriers[-1]
        assert t["memtable_bytes"] == 0
        metrics = urllib.request.urlopen(f"{base}/metrics", timeout=5).read().decode()
        assert 'dts_worker_barrier_last_committed_id{job="' in metrics
        assert "dts_worker_records_in_total" in metrics
        assert "dts_worker_commit_duration_seconds_bucket" in metrics
        # Arrow's memory comes from the pool that gives freed pages back (bridge.commands.heap)
        assert 'dts_worker_arrow_allocated_bytes{job="' in metrics
        assert 'pool="jemalloc"}' in metrics
        # the commits' lookups read the files the worker wrote from its cache
        assert _metric(metrics, "dts_worker_lookup_cache_bytes", table.name) > 0
        assert _metric(metrics, "dts_worker_lookup_cache_reads_total", table.name, "hit") > 0
    finally:
        writer.close(final_barrier=False)
        code = worker.stop()
    assert code == 0, worker.tail()


def _metric(text: str, name: str, table: str, result: str | None = None) -> float:
    """The value of one sample of the worker's exposition (its table's, or ``result``'s)."""
    for line in text.splitlines():
        ours = line.startswith(name + "{") and f'table="{table}"' in line
        if ours and (result is None or f'result="{result}"' in line):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} sample for {table} {result or ''}")
