"""The exporter over a real FileStore warehouse, in process and as `dts exporter`."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bridge.exporter import exporter_registry
from filestore import Catalog
from tests.bridge.monitoring.support import populate_warehouse, start_exporter


def scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_exporter_reports_what_is_on_disk(warehouse: Path) -> None:
    populate_warehouse(warehouse)
    before_ms = time.time_ns() // 1_000_000
    got = scrape(generate_latest(exporter_registry(str(warehouse))).decode())
    after_ms = time.time_ns() // 1_000_000
    orders = (("table", "shop.orders"),)
    on_disk = list((warehouse / "shop.db" / "orders").glob("bucket-*/data-*.parquet"))
    assert got[("dts_filestore_data_files", orders)] == len(on_disk) == 6
    assert got[("dts_filestore_data_bytes", orders)] == sum(p.stat().st_size for p in on_disk)
    assert got[("dts_filestore_snapshots_retained", orders)] == 3
    assert got[("dts_filestore_snapshot_id", orders)] == 3
    # three commits without compaction: three level-0 runs in each bucket
    for bucket in ("0", "1"):
        assert (
            got[("dts_filestore_sorted_runs", (("bucket", bucket), ("table", "shop.orders")))] == 3
        )
    assert got[("dts_filestore_sorted_runs_stop_trigger", orders)] == 3
    assert got[("dts_filestore_barrier_interval_ms", orders)] == 1000
    latest = Catalog(str(warehouse)).get_table("shop.orders").latest_snapshot()
    assert latest is not None and latest.barrier is not None
    assert got[("dts_filestore_latest_barrier_ms", orders)] == latest.barrier
    age = got[("dts_filestore_latest_barrier_age_ms", orders)]
    assert before_ms - latest.barrier <= age <= after_ms - latest.barrier
    stale_age = got[("dts_filestore_latest_barrier_age_ms", (("table", "shop.stale"),))]
    assert stale_age >= 120_000
    # the append table has files but no sorted runs; the corrupted one only counts errors
    assert got[("dts_filestore_data_files", (("table", "shop.events"),))] == 1
    assert not any(
        n == "dts_filestore_sorted_runs" and ("table", "shop.events") in lb for n, lb in got
    )
    assert got[("dts_exporter_table_errors_total", (("table", "shop.broken"),))] == 1
    assert got[("dts_exporter_table_errors_total", orders)] == 0
    assert got[("dts_filestore_tables", ())] == 5
    # compaction and expiration, read from the snapshots on disk
    compacted = Catalog(str(warehouse)).get_table("shop.compacted")
    kinds = [s.commit_kind for s in compacted.snapshots()]
    assert kinds == ["APPEND", "COMPACT"]
    written = sum(
        p.stat().st_size
        for p in (warehouse / "shop.db" / "compacted").glob("bucket-*/*.parquet")
        if p.name in {f.file_name for split in compacted.new_scan().plan() for f in split.files}
    )
    c = (("table", "shop.compacted"),)
    assert got[("dts_filestore_compactions_total", c)] == 1
    assert got[("dts_filestore_compaction_written_bytes_total", c)] == written > 0
    assert got[("dts_filestore_snapshots_expired", c)] == 2
    assert got[("dts_filestore_snapshots_retained", c)] == 2
    assert got[("dts_filestore_compactions_total", orders)] == 0
    assert got[("dts_filestore_snapshots_expired", orders)] == 0


def test_exporter_follows_new_commits(warehouse: Path) -> None:
    catalog = Catalog(str(warehouse))
    catalog.create_database("db")
    table = catalog.create_table("db.t", pa.schema([("k", pa.int64())]), primary_key=["k"])
    registry = exporter_registry(str(warehouse))
    got = scrape(generate_latest(registry).decode())
    assert got[("dts_filestore_data_files", (("table", "db.t"),))] == 0
    w = table.new_write("test")
    w.write(pa.table({"k": pa.array([1, 2], pa.int64())}))
    w.commit(barrier=1_000)
    w.close()
    got = scrape(generate_latest(registry).decode())
    assert got[("dts_filestore_data_files", (("table", "db.t"),))] == 1
    assert got[("dts_filestore_latest_barrier_ms", (("table", "db.t"),))] == 1_000
    catalog.drop_table("db.t")
    got = scrape(generate_latest(registry).decode())
    assert not any(("table", "db.t") in labels for _, labels in got)


def test_dts_exporter_command_serves_metrics(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    warehouse.mkdir()
    with start_exporter(warehouse) as address:
        text = httpx.get(f"http://{address}/metrics", timeout=10).text
    assert scrape(text)[("dts_filestore_tables", ())] == 5
    assert address.startswith("127.0.0.1:")


def test_compactions_count_up_across_scrapes_and_expiration(warehouse: Path) -> None:
    populate_warehouse(warehouse)
    registry = exporter_registry(str(warehouse))
    c = (("table", "shop.compacted"),)
    first = scrape(generate_latest(registry).decode())
    assert first[("dts_filestore_compactions_total", c)] == 1
    table = Catalog(str(warehouse)).get_table("shop.compacted")
    w = table.new_write("more")
    w.write(pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array([7, 7], pa.int64())}))
    w.commit()
    w.close()
    result = table.compact(full=True)
    assert result.snapshot is not None
    # Expire everything before the new compaction: the counters still count it once.
    table.expire(retain_min=1, retain_max=1)
    second = scrape(generate_latest(registry).decode())
    assert second[("dts_filestore_compactions_total", c)] == 2
    assert (
        second[("dts_filestore_compaction_written_bytes_total", c)]
        > first[("dts_filestore_compaction_written_bytes_total", c)]
    )
    assert second[("dts_filestore_snapshots_expired", c)] == result.snapshot.id - 1
    assert second[("dts_filestore_snapshots_retained", c)] == 1


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_dts_exporter_stops_on_ctrl_c_and_sigterm(tmp_path: Path, stop: signal.Signals) -> None:
    warehouse = tmp_path / "wh"
    warehouse.mkdir()
    populate_warehouse(warehouse)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bridge",
            "exporter",
            "--port",
            "0",
            "--warehouse",
            str(warehouse),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"http://(127\.0\.0\.1:\d+)/metrics", line)
        assert match, line
        # serving (and its threads running) before the signal
        assert httpx.get(f"http://{match.group(1)}/metrics", timeout=10).status_code == 200
        proc.send_signal(stop)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert "stopping" in proc.stderr.read()


def test_iceberg_metadata_behind_dts_shows_in_a_gauge(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from filestore.iceberg import IcebergSync

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])
    catalog = Catalog(str(warehouse))
    t = catalog.create_table("db.ice", schema, primary_key=["id"])
    catalog.create_table("db.plain", schema, primary_key=["id"])

    def commit() -> None:
        w = t.new_write("w")
        w.write(pa.table({"id": [1], "v": [1]}, schema=schema))
        w.commit()
        w.close()

    registry = exporter_registry(str(warehouse))
    key = ("dts_filestore_iceberg_snapshot_id", (("table", "db.ice"),))
    commit()
    assert key not in scrape(generate_latest(registry).decode())  # the option is off
    t.set_options({"metadata.iceberg.storage": "table-location"})
    assert scrape(generate_latest(registry).decode())[key] == 1
    with monkeypatch.context() as m:  # a failed sync: the commit stands, Iceberg lags
        m.setattr(IcebergSync, "sync", lambda self, earliest=None: None)
        commit()
    got = scrape(generate_latest(registry).decode())
    assert got[key] == 1 and got[("dts_filestore_snapshot_id", (("table", "db.ice"),))] == 2
    assert not any(n == key[0] and ("table", "db.plain") in lb for n, lb in got)
    commit()
    assert scrape(generate_latest(registry).decode())[key] == 3
