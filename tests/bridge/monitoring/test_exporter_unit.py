"""The exporter's arithmetic over a stand-in FileStore: runs, files, bytes, barriers, errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bridge.exporter import FileStoreCollector, Warehouse, sorted_run_count
from tests.bridge.monitoring.support import (
    FakeCatalog,
    FakeFile,
    FakeOptions,
    FakeSchema,
    FakeSnapshot,
    FakeSplit,
    FakeTable,
)

NOW_MS = 1_700_000_010_000


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def registry_for(catalog: FakeCatalog) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        FileStoreCollector(catalog, Warehouse(str(catalog.warehouse)), clock_ms=lambda: NOW_MS)
    )
    return registry


@pytest.mark.parametrize(
    ("levels", "runs"),
    [([], 0), ([0], 1), ([0, 0, 0], 3), ([0, 0, 5, 5, 5], 3), ([1, 2, 3], 3), ([4, 4], 1)],
)
def test_sorted_runs_count_level0_files_and_upper_levels(levels: list[int], runs: int) -> None:
    assert sorted_run_count(levels) == runs


@pytest.fixture
def catalog(tmp_path: Path) -> FakeCatalog:
    cat = FakeCatalog(tmp_path)
    cat.add(FakeTable("db.orders", FakeSchema(["id"]), FakeOptions(8, 500)))
    cat.commit(
        "db.orders",
        FakeSnapshot(1, 1_700_000_000_000, 10),
        [FakeSplit({"dt": "a"}, 0, [FakeFile(0, 100)])],
    )
    cat.commit(
        "db.orders",
        FakeSnapshot(2, 1_700_000_005_000, 30),
        [
            # bucket 0: partition a has 2 level-0 runs + level 5; partition b has 1 run
            FakeSplit({"dt": "a"}, 0, [FakeFile(0, 100), FakeFile(0, 50)]),
            FakeSplit({"dt": "a"}, 0, [FakeFile(5, 1000)]),
            FakeSplit({"dt": "b"}, 0, [FakeFile(0, 10)]),
            FakeSplit({"dt": "a"}, 1, [FakeFile(5, 7)]),
        ],
    )
    # A COMPACT snapshot without a barrier: the latest barrier is still snapshot 2's.
    cat.commit(
        "db.orders",
        FakeSnapshot(3, None, 30),
        [
            FakeSplit({"dt": "a"}, 0, [FakeFile(0, 100), FakeFile(0, 50), FakeFile(5, 1000)]),
            FakeSplit({"dt": "b"}, 0, [FakeFile(0, 10)]),
            FakeSplit({"dt": "a"}, 1, [FakeFile(5, 7)]),
        ],
    )
    cat.add(FakeTable("db.events", FakeSchema([])))
    cat.commit("db.events", FakeSnapshot(1, None, 4), [FakeSplit({}, 0, [FakeFile(0, 9)] * 4)])
    cat.add(FakeTable("db.empty", FakeSchema(["k"])))
    return cat


def test_collector_reports_files_runs_and_barrier(catalog: FakeCatalog) -> None:
    got = samples(registry_for(catalog))
    orders = (("table", "db.orders"),)
    assert got[("dts_filestore_tables", ())] == 3
    assert got[("dts_filestore_snapshot_id", orders)] == 3
    assert got[("dts_filestore_snapshots_retained", orders)] == 3
    assert got[("dts_filestore_data_files", orders)] == 5
    assert got[("dts_filestore_data_bytes", orders)] == 1167
    assert got[("dts_filestore_records", orders)] == 30
    # bucket 0: max(partition a: 2 level-0 + level 5 = 3, partition b: 1) = 3; bucket 1: 1
    assert got[("dts_filestore_sorted_runs", (("bucket", "0"), ("table", "db.orders")))] == 3
    assert got[("dts_filestore_sorted_runs", (("bucket", "1"), ("table", "db.orders")))] == 1
    assert got[("dts_filestore_sorted_runs_stop_trigger", orders)] == 8
    assert got[("dts_filestore_latest_barrier_ms", orders)] == 1_700_000_005_000
    assert got[("dts_filestore_latest_barrier_age_ms", orders)] == 5_000
    assert got[("dts_filestore_barrier_interval_ms", orders)] == 500
    assert got[("dts_exporter_table_errors_total", orders)] == 0


def test_append_table_has_no_sorted_runs_and_no_barrier(catalog: FakeCatalog) -> None:
    got = samples(registry_for(catalog))
    events = (("table", "db.events"),)
    assert got[("dts_filestore_data_files", events)] == 4
    assert not any(
        name == "dts_filestore_sorted_runs" and ("table", "db.events") in labels
        for name, labels in got
    )
    assert ("dts_filestore_latest_barrier_ms", events) not in got
    assert ("dts_filestore_sorted_runs_stop_trigger", events) not in got


def test_table_without_snapshot_reports_zero_files(catalog: FakeCatalog) -> None:
    got = samples(registry_for(catalog))
    empty = (("table", "db.empty"),)
    assert got[("dts_filestore_data_files", empty)] == 0
    assert got[("dts_filestore_snapshots_retained", empty)] == 0
    assert ("dts_filestore_snapshot_id", empty) not in got


def test_manifests_are_read_once_per_snapshot(catalog: FakeCatalog) -> None:
    registry = registry_for(catalog)
    samples(registry)
    samples(registry)
    orders = catalog.tables["db.orders"]
    assert orders.scans == 1
    catalog.commit("db.orders", FakeSnapshot(4, 1_700_000_009_000, 31), [])
    got = samples(registry)
    assert orders.scans == 2
    assert got[("dts_filestore_latest_barrier_age_ms", (("table", "db.orders"),))] == 1_000
    assert got[("dts_filestore_data_files", (("table", "db.orders"),))] == 0


def test_broken_table_counts_errors_and_keeps_others(catalog: FakeCatalog) -> None:
    catalog.broken.add("db.broken")
    registry = registry_for(catalog)
    samples(registry)
    got = samples(registry)
    assert got[("dts_exporter_table_errors_total", (("table", "db.broken"),))] == 2
    assert got[("dts_filestore_data_files", (("table", "db.orders"),))] == 5
    catalog.broken.clear()
    got = samples(registry)
    assert ("dts_exporter_table_errors_total", (("table", "db.broken"),)) not in got


def test_dropped_table_disappears(catalog: FakeCatalog) -> None:
    registry = registry_for(catalog)
    samples(registry)
    del catalog.tables["db.orders"]
    got = samples(registry)
    assert not any(("table", "db.orders") in labels for _, labels in got)
    assert got[("dts_filestore_tables", ())] == 2
