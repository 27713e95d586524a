"""One sample of everything the soak watches: the processes, the tables, the directories,
and what the side's probe (``bench.pipeline.probe``) saw since the previous sample."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.pipeline.model import CUSTOMERS, TABLES
from bench.pipeline.probe import process_trees, read_samples
from bench.pipeline.report import freshness
from bench.pipeline.side import SAMPLES
from bench.soak.disk import DirUsage, dir_usage, dirs_usage, table_usage
from bench.soak.jvm import live_heap_bytes
from bench.soak.procs import Usage, tree_usage
from bench.soak.series import MB, key
from bridge.demo.report import by_table, worker_metrics
from bridge.exporter import Warehouse
from filestore import Catalog

#: the worker's Normalizer spills under tempfile.mkdtemp(prefix=...) (logstore.normalize)
SPILL_PREFIX = "dts-normalize-"
#: the worker's gauges of what it holds, by the series metric they are sampled as
WORKER_MEMORY = {
    "cache_mb": "dts_worker_lookup_cache_bytes",
    "memtable_mb": "dts_worker_memtable_bytes",
}


@dataclass
class Sample:
    t: float  # unix seconds
    elapsed_s: float
    values: dict[str, float | None]
    errors: list[str] = field(default_factory=list)
    # per process, its threads by name: not a series (a JVM has dozens of names), but where
    # a thread series' change is (changed_thread_names)
    threads: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Places:
    """Where the pipeline keeps its state on this machine."""

    warehouse: Path
    checkpoints: Path  # the Spark streams'
    spark_local: Path  # Spark's scratch space, warehouse and logs (local_session)
    tmp: Path  # TMPDIR of every process the soak starts
    kafka: Path  # the broker's log directory
    service_logs: Path
    probe_samples: Path

    @classmethod
    def of(cls, work: Path, side_work: Path) -> Places:
        return cls(
            side_work / "warehouse",
            side_work / "checkpoints",
            side_work / "spark",
            work / "tmp",
            work / "broker" / "kraft-logs",
            side_work / "logs",
            side_work / SAMPLES,
        )

    def dirs(self) -> dict[str, DirUsage]:
        return {
            "checkpoints": dir_usage(self.checkpoints),
            "normalizer_spill": dirs_usage(sorted(self.tmp.glob(f"{SPILL_PREFIX}*"))),
            "kafka_logs": dir_usage(self.kafka),
            "metaservice_db": dir_usage(self.warehouse / "_meta"),
            "spark_local": dir_usage(self.spark_local),
            "service_logs": dir_usage(self.service_logs),
        }


def _short(table: str) -> str:
    return table.split(".")[-1]


@dataclass
class Collector:
    places: Places
    roots: Mapping[str, int]
    started: float
    rate: Callable[[], float | None]  # the input's rate, as its last slice achieved it
    jvms: Mapping[str, int] = field(default_factory=dict)  # whose live heap is sampled
    worker_url: str | None = None  # the worker's web address: what its memory holds
    _prev: tuple[float, dict[str, float]] | None = None  # the previous sample's time, CPU s

    def sample(self) -> Sample:
        t = time.time()
        out = Sample(t, t - self.started, {})
        v = out.values
        # the process trees read once a sample: each count and its thread names together
        procs = tree_usage(process_trees(dict(self.roots)))
        cpu = self._processes(t, v, procs)
        out.threads = {name: dict(sorted(u.thread_names.items())) for name, u in procs.items()}
        self._tables(v, out.errors)
        if self.worker_url is not None:
            self._worker(self.worker_url, v, out.errors)
        for name, usage in self.places.dirs().items():
            v[key("dir", name, "mb")] = usage.bytes / MB
            v[key("dir", name, "files")] = usage.files
        lo = self._prev[0] if self._prev is not None else self.started
        self._probe(lo, t, v)
        v[key("source", "orders", "changes_per_s")] = self.rate()
        v[key("machine", "all", "load_1m")] = os.getloadavg()[0]
        self._prev = (t, cpu)
        return out

    def _processes(
        self, t: float, v: dict[str, float | None], usage: dict[str, Usage]
    ) -> dict[str, float]:
        for name, u in usage.items():
            v[key("process", name, "rss_mb")] = u.rss_bytes / MB
            v[key("process", name, "cpu_s")] = u.cpu_s
            v[key("process", name, "threads")] = u.threads
            v[key("process", name, "open_files")] = u.open_files
            cores = None
            if self._prev is not None and name in self._prev[1]:
                cores = (u.cpu_s - self._prev[1][name]) / (t - self._prev[0])
            v[key("process", name, "cpu_cores")] = cores
        for name, pid in self.jvms.items():
            live = live_heap_bytes(pid)
            v[key("process", name, "heap_live_mb")] = None if live is None else live / MB
        return {name: u.cpu_s for name, u in usage.items()}

    def _tables(self, v: dict[str, float | None], errors: list[str]) -> None:
        catalog = Catalog(str(self.places.warehouse))
        warehouse = Warehouse(str(self.places.warehouse))
        for table in (*TABLES, CUSTOMERS):
            name = _short(table)
            try:
                u = table_usage(catalog, warehouse, table)
            except Exception as exc:  # a sample that fails is recorded, never the run's end
                errors.append(f"{table}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            v[key("table", name, "mb")] = u.bytes / MB
            v[key("table", name, "files_per_bucket")] = u.files_per_bucket
            v[key("table", name, "manifests")] = u.manifests
            v[key("table", name, "snapshots")] = u.snapshots
            v[key("table", name, "compactions")] = u.compactions
            v[key("table", name, "appends")] = u.appends

    def _worker(self, url: str, v: dict[str, float | None], errors: list[str]) -> None:
        """What the worker holds in memory by table, from its /metrics: the decoded files
        its commits keep for lookups and the rows buffered since the last barrier. The
        worker's RSS is mostly these; a step in it is explained by them, or it is not."""
        try:
            metrics = worker_metrics(url)  # once for every family: one GET per sample
        except httpx.HTTPError as exc:  # a missed sample, never the run's end
            errors.append(f"worker /metrics: {type(exc).__name__}: {str(exc)[:200]}")
            return
        for metric, family in WORKER_MEMORY.items():
            for table, value in by_table(metrics, family).items():
                v[key("worker", _short(table), metric)] = value / MB
        arrow = by_table(metrics, "dts_worker_arrow_allocated_bytes")
        if arrow:  # the process's, not a table's: RSS above it is the allocators' own
            v[key("worker", "process", "arrow_mb")] = sum(arrow.values()) / MB

    def _probe(self, lo: float, hi: float, v: dict[str, float | None]) -> None:
        """Freshness p99 of each table and the strong reads started in [lo, hi)."""
        probe = read_samples(self.places.probe_samples)
        for table in TABLES:
            lags = freshness(probe, table, lo, hi)
            v[key("freshness", _short(table), "p99_s")] = (
                float(np.percentile(lags, 99)) if lags.size else None
            )
        reads = consistency(probe, lo, hi)
        for metric in ("reads", "disagreed", "read_errors"):
            v[key("probe", "strong", metric)] = reads[metric]


def consistency(probe: list[dict[str, Any]], lo: float, hi: float) -> dict[str, Any]:
    """The strong reads started in [lo, hi): how many, how many disagreed with the oracle
    (and the first few of those), how many failed."""
    within = [s for s in probe if lo <= s["t"] < hi]
    wrong = [s for s in within if s.get("wrong")]
    return {
        "reads": sum(1 for s in within if "wrong" in s),
        "disagreed": len(wrong),
        "read_errors": sum(1 for s in within if "error" in s),
        "first_disagreements": wrong[:3],
        "errors": Counter(s["error"][:160] for s in within if "error" in s).most_common(5),
    }


def columns(samples: list[Sample]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Seconds into the run, and each series' values over them (NaN where not sampled)."""
    t = np.array([s.elapsed_s for s in samples], dtype=float)
    names = sorted({k for s in samples for k in s.values})
    nan = float("nan")
    series = {
        n: np.array(
            [v if (v := s.values.get(n)) is not None else nan for s in samples], dtype=float
        )
        for n in names
    }
    return t, series
