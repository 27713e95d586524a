"""Prometheus exporter for FileStore state: what a warehouse holds, read on every scrape.

The exporter is a custom ``prometheus_client`` collector with its own registry: each
scrape lists the warehouse's tables and reports, per table, the latest snapshot, the live
data files and bytes, the sorted runs per bucket (primary-key tables), the snapshots
retained, and the latest barrier with its age. Work per scrape stays small because
everything derived from a snapshot's manifests is cached by (table, snapshot id); only
the snapshot directory listing and the barrier age are recomputed each time.

Metric names follow ``dts_<part>_<what>_<unit>`` with labels ``table`` and ``bucket``
(see docs/internals.md; the registry is ``exporter_registry`` here, the worker's and the
MetaService's are ``bridge.worker.metrics`` and ``bridge.meta.metrics``).

Imports within bridge: nothing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow.fs as pafs
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from filestore import Catalog, Snapshot, Table
from filestore.format.manifest import ADD
from filestore.format.snapshot import COMPACT
from filestore.iceberg import IcebergSync
from filestore.io.fileio import resolve_filesystem

log = logging.getLogger(__name__)

# How far back to look for the latest snapshot that carries a barrier (COMPACT and batch
# snapshots may carry none); older barriers are not "latest" in any useful sense.
BARRIER_LOOKBACK = 32
# Snapshots read per table and scrape to count compactions; a backlog is read over scrapes.
HISTORY_READS_PER_SCRAPE = 200


# What the exporter reads of the FileStore API, as read-only members so that both the
# real types (filestore.Catalog, Table, Snapshot, Split, DataFileMeta, CoreOptions) and
# the unit tests' stand-in (tests/bridge/monitoring/support.py) satisfy them.


class DataFileLike(Protocol):
    @property
    def level(self) -> int: ...
    @property
    def file_size(self) -> int: ...


class SplitLike(Protocol):
    @property
    def partition(self) -> Mapping[str, Any]: ...
    @property
    def bucket(self) -> int: ...
    @property
    def files(self) -> Iterable[DataFileLike]: ...


class ScanLike(Protocol):
    def plan(self) -> Iterable[SplitLike]: ...


class SnapshotLike(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def barrier(self) -> int | None: ...
    @property
    def total_record_count(self) -> int | None: ...


class TableSchemaLike(Protocol):
    @property
    def primary_key(self) -> list[str]: ...


class OptionsLike(Protocol):
    """The resolved options the exporter reads (``filestore.format.options.CoreOptions``)."""

    @property
    def num_sorted_run_stop_trigger(self) -> int: ...
    @property
    def barrier_interval_ms(self) -> int: ...


class TableLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def schema(self) -> TableSchemaLike: ...
    @property
    def options(self) -> OptionsLike: ...
    def latest_snapshot(self) -> SnapshotLike | None: ...
    def snapshot(self, snapshot_id: int) -> SnapshotLike: ...
    def new_scan(self, snapshot_id: int | None = None) -> ScanLike: ...


class CatalogLike(Protocol):
    def list_tables(self, db: str | None = None) -> list[str]: ...
    def get_table(self, name: str) -> TableLike: ...


@dataclass(frozen=True)
class FileStats:
    """What the exporter derives from one snapshot's manifests (cached per snapshot id)."""

    snapshot_id: int
    data_files: int
    data_bytes: int
    records: int | None
    # bucket -> greatest sorted-run count over the bucket's partitions (the writer of the
    # worst partition is the one that stalls); empty for tables without a primary key.
    sorted_runs: dict[int, int]
    stop_trigger: int | None
    latest_barrier: int | None
    barrier_interval_ms: int


def sorted_run_count(levels: Iterable[int]) -> int:
    """Sorted runs of one bucket: every level-0 file is a run, every other level is one run."""
    level0 = 0
    upper: set[int] = set()
    for level in levels:
        if level == 0:
            level0 += 1
        else:
            upper.add(level)
    return level0 + len(upper)


def file_stats(table: TableLike, snapshot: SnapshotLike) -> FileStats:
    """Files, bytes and sorted runs of ``snapshot``, read from its manifests through a scan."""
    # Splits of one (partition, bucket) may come in several pieces: group files first.
    levels: dict[tuple[tuple[tuple[str, Any], ...], int], list[int]] = {}
    files = size = 0
    for split in table.new_scan(snapshot_id=snapshot.id).plan():
        key = (tuple(sorted(dict(split.partition).items())), int(split.bucket))
        bucket_levels = levels.setdefault(key, [])
        for f in split.files:
            files += 1
            size += int(f.file_size)
            bucket_levels.append(int(f.level))
    options: OptionsLike = table.options
    runs: dict[int, int] = {}
    trigger: int | None = None
    if table.schema.primary_key:  # sorted runs are an LSM notion: primary-key tables only
        for (_, bucket), lv in levels.items():
            runs[bucket] = max(runs.get(bucket, 0), sorted_run_count(lv))
        trigger = options.num_sorted_run_stop_trigger
    return FileStats(
        snapshot_id=snapshot.id,
        data_files=files,
        data_bytes=size,
        records=snapshot.total_record_count,
        sorted_runs=runs,
        stop_trigger=trigger,
        latest_barrier=latest_barrier(table, snapshot),
        barrier_interval_ms=options.barrier_interval_ms,
    )


def latest_barrier(table: TableLike, latest: SnapshotLike) -> int | None:
    """The barrier of the newest snapshot that carries one, looking back a bounded way."""
    snap: SnapshotLike | None = latest
    for _ in range(BARRIER_LOOKBACK):
        if snap is None:
            return None
        if snap.barrier is not None:
            return int(snap.barrier)
        if snap.id <= 1:
            return None
        try:
            snap = table.snapshot(snap.id - 1)
        except Exception:  # expired under our feet: no older barrier to report
            return None
    return None


class Warehouse:
    """Where the tables of a warehouse live on its filesystem (layout of DESIGN.md)."""

    def __init__(self, warehouse: str, filesystem: pafs.FileSystem | None = None) -> None:
        if filesystem is not None:
            self.fs, self.root = filesystem, warehouse.rstrip("/")
        elif "://" in warehouse:
            self.fs, self.root = pafs.FileSystem.from_uri(warehouse)
        else:
            self.fs, self.root = pafs.LocalFileSystem(), os.path.abspath(warehouse)

    def table_dir(self, name: str) -> str:
        db, _, table = name.partition(".")
        return f"{self.root}/{db}.db/{table}"

    def snapshots_retained(self, name: str) -> int:
        """Count ``snapshot-<N>`` files: a listing, not a read of every snapshot."""
        return len(self.snapshot_ids(name))

    def snapshot_ids(self, name: str) -> list[int]:
        """Ids of the ``snapshot-<N>`` files, sorted: a listing, not a read of every snapshot."""
        selector = pafs.FileSelector(f"{self.table_dir(name)}/snapshot", allow_not_found=True)
        names = (info.base_name for info in self.fs.get_file_info(selector))
        return sorted(int(n[9:]) for n in names if n.startswith("snapshot-") and n[9:].isdigit())


@dataclass
class History:
    """Compactions seen in a table's snapshots since the exporter started (counters)."""

    next_id: int  # the first snapshot id not yet looked at
    compactions: int = 0
    compaction_bytes: int = 0


def compaction_bytes(table: Table, snapshot: Snapshot) -> int:
    """Bytes of the files a COMPACT snapshot added (its delta manifests' ADD entries)."""
    entries = table.manifest_store.read_entries([snapshot.delta_manifest_list])
    return sum(int(e.file.file_size) for e in entries if e.kind == ADD)


class FileStoreCollector(Collector):
    """Collects FileStore metrics for every table of a warehouse on each scrape."""

    def __init__(
        self,
        catalog: CatalogLike,
        warehouse: Warehouse,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._catalog = catalog
        self._warehouse = warehouse
        self._clock_ms = clock_ms
        self._cache: dict[str, FileStats] = {}
        self._errors: dict[str, int] = {}
        self._history: dict[str, History] = {}
        # table -> (Iceberg metadata version, the snapshot it shows): parsed once a version
        self._iceberg: dict[str, tuple[int, int]] = {}
        # Prometheus may scrape concurrently; the cache and error counts are shared.
        self._lock = threading.Lock()

    def describe(self) -> Iterator[Metric]:
        # Registering must not scan the warehouse; an empty describe() tells the registry so.
        return iter(())

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            yield from self._collect()

    def _collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        m = _Families()
        names = sorted(self._catalog.list_tables())
        m.tables.add_metric([], len(names))
        for name in names:
            try:
                self._collect_table(name, m)
            except Exception as exc:  # one broken table must not hide the others
                self._errors[name] = self._errors.get(name, 0) + 1
                log.warning("exporter: cannot read table %s: %s", name, exc)
        # Forget tables that were dropped so their series disappear.
        self._cache = {k: v for k, v in self._cache.items() if k in names}
        self._history = {k: v for k, v in self._history.items() if k in names}
        self._iceberg = {k: v for k, v in self._iceberg.items() if k in names}
        self._errors = {k: v for k, v in self._errors.items() if k in names}
        # Every table gets an error series from its first scrape on (at 0), so increase()
        # sees the first error instead of a series appearing out of nothing.
        for name in names:
            m.errors.add_metric([name], self._errors.get(name, 0))
        m.duration.add_metric([], time.perf_counter() - started)
        yield from m.all()

    def _collect_table(self, name: str, m: _Families) -> None:
        table = self._catalog.get_table(name)
        ids = self._warehouse.snapshot_ids(name)
        m.snapshots_retained.add_metric([name], len(ids))
        # Snapshot ids start at 1 and only a prefix of the history expires: every id below
        # the earliest retained one was expired.
        m.snapshots_expired.add_metric([name], ids[0] - 1 if ids else 0)
        history = self._compactions(name, table, ids)
        m.compactions.add_metric([name], history.compactions)
        m.compaction_bytes.add_metric([name], history.compaction_bytes)
        snapshot = table.latest_snapshot()
        if snapshot is None:
            m.data_files.add_metric([name], 0)
            m.data_bytes.add_metric([name], 0)
            return
        stats = self._cache.get(name)
        if stats is None or stats.snapshot_id != snapshot.id:
            stats = file_stats(table, snapshot)
            self._cache[name] = stats
        m.snapshot_id.add_metric([name], stats.snapshot_id)
        m.data_files.add_metric([name], stats.data_files)
        m.data_bytes.add_metric([name], stats.data_bytes)
        if stats.records is not None:
            m.records.add_metric([name], stats.records)
        for bucket, runs in sorted(stats.sorted_runs.items()):
            m.sorted_runs.add_metric([name, str(bucket)], runs)
        if stats.stop_trigger is not None:
            m.stop_trigger.add_metric([name], stats.stop_trigger)
        if stats.latest_barrier is not None:
            m.barrier.add_metric([name], stats.latest_barrier)
            m.barrier_age.add_metric([name], max(0, self._clock_ms() - stats.latest_barrier))
        m.barrier_interval.add_metric([name], stats.barrier_interval_ms)
        if isinstance(table, Table) and table.options.iceberg_storage != "disabled":
            m.iceberg_snapshot_id.add_metric([name], self._iceberg_snapshot(name, table))

    def _iceberg_snapshot(self, name: str, table: Table) -> int:
        """The snapshot the table's Iceberg metadata shows (-1: none written yet)."""
        sync = IcebergSync(table)
        version = sync.current_version()
        if version is None:
            return -1
        cached = self._iceberg.get(name)
        if cached is None or cached[0] != version:
            cached = (version, sync.current_snapshot_id(version))
            self._iceberg[name] = cached
        return cached[1]

    def _compactions(self, name: str, table: TableLike, ids: list[int]) -> History:
        """Read the snapshots committed since the last scrape (at most
        ``HISTORY_READS_PER_SCRAPE``; the rest next time) and count the COMPACT ones."""
        history = self._history.setdefault(name, History(next_id=ids[0] if ids else 1))
        todo = [i for i in ids if i >= history.next_id][:HISTORY_READS_PER_SCRAPE]
        for snapshot_id in todo:
            try:
                snapshot = table.snapshot(snapshot_id)
            except Exception:  # expired between the listing and the read: nothing to count
                continue
            # commit kinds and manifests are the real FileStore's (the stand-in has neither)
            if (
                isinstance(snapshot, Snapshot)
                and snapshot.commit_kind == COMPACT
                and isinstance(table, Table)
            ):
                history.compactions += 1
                history.compaction_bytes += compaction_bytes(table, snapshot)
        if todo:
            history.next_id = todo[-1] + 1
        return history


class _Families:
    """The metric families of one scrape."""

    def __init__(self) -> None:
        t = ["table"]
        self.tables = GaugeMetricFamily("dts_filestore_tables", "Tables in the warehouse.")
        self.snapshot_id = GaugeMetricFamily(
            "dts_filestore_snapshot_id", "Id of the table's latest snapshot.", labels=t
        )
        self.snapshots_retained = GaugeMetricFamily(
            "dts_filestore_snapshots_retained",
            "Snapshots not yet expired (snapshot-<N> files).",
            labels=t,
        )
        self.data_files = GaugeMetricFamily(
            "dts_filestore_data_files", "Live data files in the latest snapshot.", labels=t
        )
        self.data_bytes = GaugeMetricFamily(
            "dts_filestore_data_bytes", "Bytes of live data files in the latest snapshot.", labels=t
        )
        self.snapshots_expired = GaugeMetricFamily(
            "dts_filestore_snapshots_expired",
            "Snapshots expired so far (ids below the earliest retained snapshot).",
            labels=t,
        )
        self.compactions = CounterMetricFamily(
            "dts_filestore_compactions",
            "COMPACT snapshots committed (counted since the exporter started; at start, "
            "the retained ones).",
            labels=t,
        )
        self.compaction_bytes = CounterMetricFamily(
            "dts_filestore_compaction_written_bytes",
            "Bytes of the files compactions wrote (same counting as dts_filestore_compactions).",
            labels=t,
        )
        self.records = GaugeMetricFamily(
            "dts_filestore_records",
            "Records in the latest snapshot (before merge), from the snapshot's record count.",
            labels=t,
        )
        self.sorted_runs = GaugeMetricFamily(
            "dts_filestore_sorted_runs",
            "Sorted runs per bucket (the greatest over the bucket's partitions); primary-key tables.",
            labels=["table", "bucket"],
        )
        self.stop_trigger = GaugeMetricFamily(
            "dts_filestore_sorted_runs_stop_trigger",
            "Sorted-run count at which the table's writers stall (num-sorted-run.stop-trigger).",
            labels=t,
        )
        self.barrier = GaugeMetricFamily(
            "dts_filestore_latest_barrier_ms",
            "Barrier (epoch ms) of the newest snapshot carrying one.",
            labels=t,
        )
        self.barrier_age = GaugeMetricFamily(
            "dts_filestore_latest_barrier_age_ms",
            "Now minus the latest committed barrier, in milliseconds (FileStore freshness).",
            labels=t,
        )
        self.barrier_interval = GaugeMetricFamily(
            "dts_filestore_barrier_interval_ms",
            "The table's barrier.interval option, in milliseconds.",
            labels=t,
        )
        self.iceberg_snapshot_id = GaugeMetricFamily(
            "dts_filestore_iceberg_snapshot_id",
            "Snapshot the table's Iceberg metadata shows (tables with metadata.iceberg.storage; "
            "-1: none written): below dts_filestore_snapshot_id, Iceberg readers see an older "
            "table until a commit catches up.",
            labels=t,
        )
        self.errors = CounterMetricFamily(
            "dts_exporter_table_errors",
            "Scrapes on which a table could not be read.",
            labels=t,
        )
        self.duration = GaugeMetricFamily(
            "dts_exporter_scrape_duration_seconds",
            "Time the last scrape took to read the warehouse.",
        )

    def all(self) -> list[Metric]:
        return [
            self.tables,
            self.snapshot_id,
            self.snapshots_retained,
            self.snapshots_expired,
            self.compactions,
            self.compaction_bytes,
            self.data_files,
            self.data_bytes,
            self.records,
            self.sorted_runs,
            self.stop_trigger,
            self.barrier,
            self.barrier_age,
            self.barrier_interval,
            self.iceberg_snapshot_id,
            self.errors,
            self.duration,
        ]


def exporter_registry(
    warehouse: str, filesystem: pafs.FileSystem | None = None
) -> CollectorRegistry:
    """A fresh registry holding a FileStore collector for ``warehouse``."""
    catalog = Catalog(warehouse, filesystem=filesystem)
    # Resolve the filesystem the way the FileStore does, so both see the same root.
    fs, root = resolve_filesystem(warehouse, filesystem)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FileStoreCollector(catalog, Warehouse(root, fs)))
    return registry
