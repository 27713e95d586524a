"""The soak (bench/soak, `make soak`) cannot rot: its verdict passes a flat noisy series and a
sawtooth and fails a climbing one, its /proc readers measure this test's own process, and
the whole soak runs for half a minute through the real pipeline. Its hour is a benchmark,
not a test."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from bench.pipeline.probe import process_trees
from bench.soak.collect import Collector, Places, Sample, columns
from bench.soak.disk import DirUsage, dir_usage, table_usage
from bench.soak.housekeeping import cleanup_summary
from bench.soak.jvm import live_heap_bytes
from bench.soak.procs import (
    changed_thread_names,
    open_files,
    read_usage,
    thread_names,
    tree_usage,
)
from bench.soak.series import MB, Metric, metric_of
from bench.soak.settings import Lifecycle
from bench.soak.verdict import judge
from filestore.format.options import CoreOptions, check_known
from logstore.broker import EmbeddedBroker

RSS = metric_of("process/worker/rss_mb")
HOUR = 3600.0
T = np.arange(0.0, HOUR + 1, 60.0)  # a sample a minute for an hour
WINDOW = (HOUR / 3, HOUR)
MB_BYTES = 1 << 20


def test_a_flat_noisy_series_passes() -> None:
    rng = np.random.default_rng(3)
    y = 500 + rng.normal(0, 20, T.size)  # 500 MB, 20 MB of noise
    v = judge("process/worker/rss_mb", T, y, RSS, *WINDOW)
    assert v.passed, v
    assert v.samples == 41  # minutes 20..60
    assert v.noise is not None and 10 < v.noise < 30
    assert v.bound is not None and v.bound == pytest.approx(3 * v.noise)


def test_a_growing_series_fails_even_under_noise() -> None:
    rng = np.random.default_rng(3)
    y = 500 + 200 * T / HOUR + rng.normal(0, 20, T.size)  # +200 MB an hour
    v = judge("process/worker/rss_mb", T, y, RSS, *WINDOW)
    assert not v.passed, v
    assert v.slope_per_h == pytest.approx(200, rel=0.25)
    assert v.growth is not None and v.bound is not None and v.growth > v.bound


def test_a_sawtooth_passes_and_a_climbing_sawtooth_fails() -> None:
    """Kafka's segments and retained snapshots fill up and are deleted over and over."""
    teeth = (T % 600) / 600 * 50  # 0 .. 50 MB every 10 minutes
    assert judge("dir/kafka_logs/mb", T, 100 + teeth, metric_of("dir/x/mb"), *WINDOW).passed
    climbing = 100 + teeth + 100 * T / HOUR
    assert not judge("dir/kafka_logs/mb", T, climbing, metric_of("dir/x/mb"), *WINDOW).passed


def test_the_floor_keeps_a_tiny_exact_slope_from_failing() -> None:
    """A noiseless series has no noise to hide in: the floor decides (2 data files)."""
    files = metric_of("table/orders/files_per_bucket")
    assert judge("t", T, 4 + T / HOUR, files, *WINDOW).passed  # +0.67 over 40 min
    assert not judge("t", T, 4 + 6 * T / HOUR, files, *WINDOW).passed  # +4


def test_a_falling_read_rate_is_the_bad_direction() -> None:
    reads = metric_of("probe/strong/reads")
    falling = 40 - 30 * T / HOUR
    assert not judge("r", T, falling, reads, *WINDOW).passed
    assert judge("r", T, 40 + 30 * T / HOUR, reads, *WINDOW).passed


def test_a_constant_series_is_exactly_flat() -> None:
    v = judge("x", T, np.full(T.size, 3.0), metric_of("dir/x/files"), *WINDOW)
    assert v.passed and v.slope_per_h == 0.0 and v.noise == 0.0 and v.line == (3.0, 3.0)


def test_unsampled_points_are_skipped_and_too_few_fail() -> None:
    y = np.full(T.size, np.nan)
    y[-2:] = 1.0
    v = judge("x", T, y, Metric("x", 1.0), *WINDOW)
    assert not v.passed and v.samples == 2 and "needed" in v.note


def test_columns_line_samples_up_by_series() -> None:
    samples = [Sample(100.0, 0.0, {"a/b/mb": 1.0}), Sample(160.0, 60.0, {"a/b/mb": None})]
    t, series = columns(samples)
    assert t.tolist() == [0.0, 60.0]
    assert series["a/b/mb"][0] == 1.0 and np.isnan(series["a/b/mb"][1])


def test_the_proc_readers_measure_this_process() -> None:
    usage = read_usage(os.getpid())
    assert usage is not None
    assert 10 * MB < usage.rss_bytes < 8 * 1024 * MB
    assert usage.threads >= 1 and usage.processes == 1
    assert usage.open_files >= 3 and abs(open_files(os.getpid()) - usage.open_files) <= 2
    # a thread and an open file more show up
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    with open(__file__) as _:
        more = read_usage(os.getpid())
        assert more is not None
        assert more.threads >= usage.threads + 1
        assert more.open_files >= usage.open_files + 1
    stop.set()
    thread.join()
    # CPU time is utime + stime: it grows with work done
    started = time.process_time()
    while time.process_time() - started < 0.3:
        sum(range(10_000))
    after = read_usage(os.getpid())
    assert after is not None and after.cpu_s >= usage.cpu_s + 0.2


def test_a_tree_is_measured_with_its_descendants_and_a_gone_process_is_empty() -> None:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        trees = tree_usage(process_trees({"me": os.getpid()}))
        alone = read_usage(os.getpid())
        assert alone is not None
        assert trees["me"].processes >= 2  # this process and the child
        assert trees["me"].rss_bytes > alone.rss_bytes
    finally:
        child.kill()
        child.wait()
    assert read_usage(child.pid) is None
    assert tree_usage(process_trees({"gone": child.pid}))["gone"].processes == 0


def test_threads_are_counted_by_name_with_a_pools_numbers_folded() -> None:
    """A pool's threads (``soak-pool-0``, ``soak-pool-1``: a native pool names its threads,
    as tokio's and the JVM's do) share one name, so a change in a process's thread count
    names the pool it is in."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_name = 15  # prctl(2): names the calling thread, as /proc/.../comm shows it
    started = threading.Barrier(4)  # three named threads and this one, all alive at once
    done = threading.Event()

    def named(n: int) -> None:
        assert libc.prctl(pr_set_name, f"soak-pool-{n}".encode(), 0, 0, 0) == 0
        started.wait()
        done.wait()

    before = thread_names(os.getpid())
    threads = [threading.Thread(target=named, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    try:
        started.wait()
        during = thread_names(os.getpid())
        tree = tree_usage(process_trees({"me": os.getpid()}))["me"]
        assert tree.thread_names["soak-pool-#"] == 3 and tree.threads >= 4
    finally:
        done.set()
        for t in threads:
            t.join()
    assert during["soak-pool-#"] == 3 and "soak-pool-#" not in before
    assert sum(during.values()) == sum(before.values()) + 3
    assert changed_thread_names({"me": dict(before)}, {"me": dict(during)}) == {
        "me": {"soak-pool-#": (0, 3)}
    }
    assert changed_thread_names({"me": dict(before)}, {"me": dict(before)}) == {}
    assert thread_names(2**22 + 1) == {}  # no such process


def test_dir_usage_counts_the_bytes_on_disk_and_the_files(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(os.urandom(1 << 20))
    with open(tmp_path / "sparse.index", "wb") as f:  # as Kafka preallocates its indexes
        f.truncate(10 << 20)
    usage = dir_usage(tmp_path)
    assert usage.files == 2
    assert (1 << 20) <= usage.bytes < (2 << 20)  # the sparse 10 MB take (almost) nothing
    assert dir_usage(tmp_path / "absent") == DirUsage(0, 0)


def test_a_tables_usage_counts_its_snapshots_and_the_compactions_among_them(
    tmp_path: Path,
) -> None:
    import pyarrow as pa

    from bridge.exporter import Warehouse
    from filestore import Catalog

    catalog = Catalog(str(tmp_path))
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    table = catalog.create_table("db.t", schema, primary_key=["id"], options={"bucket": "1"})
    w = table.new_write("w")
    for i in range(3):
        w.write(pa.table({"id": pa.array([i, i + 1], pa.int64()), "v": [f"c{i}"] * 2}))
        w.commit()
    table.compact(full=True)
    usage = table_usage(catalog, Warehouse(str(tmp_path)), "db.t")
    assert (usage.snapshots, usage.compactions, usage.appends) == (4, 1, 3)
    assert usage.files_per_bucket == 1 and usage.bytes > 0


def test_the_lifecycle_scales_with_the_run() -> None:
    assert Lifecycle.for_run(3600).retention_s == 120
    assert Lifecycle.for_run(240).retention_s == 120  # never under 2 min by default
    assert Lifecycle.for_run(6 * 3600).retention_s == 300  # nor over 5
    life = Lifecycle.for_run(3600, 90)
    options = life.table_options()
    check_known(options)  # every one a real table option, each value one it parses
    resolved = CoreOptions.from_map(options)
    assert resolved.snapshot_time_retained_ms == resolved.log_retention_ms == 90_000
    assert options["snapshot.time-retained"] == "90 s" and options["log.retention"] == "90 s"
    assert int(life.broker_properties()["log.roll.ms"]) == 30_000
    assert life.orphan_older_than_ms == 180_000
    # the MetaService keeps three periods of barriers: its database levels off in minutes
    assert life.keep_barriers(1.0) == 270 and life.keep_barriers(0.4) == 675


def test_the_cleanup_summary_counts_failed_attempts_and_tables_given_up() -> None:
    runs = [
        {"deleted": {"a": 2, "b": 0}, "bytes": 1 << 20, "errors": ["a: FileNotFoundError: x"]},
        {"deleted": {"b": 1}, "bytes": 0, "errors": ["a: FileNotFoundError: y"] * 3},
    ]
    line = cleanup_summary(runs)
    assert "2 runs, 3 files (1.00 MB) deleted, 4 failed attempts" in line
    assert "1 tables left for the next run" in line  # a, in the second run
    assert line.endswith("(first: a: FileNotFoundError: x)")


def test_the_soak_broker_holds_its_whole_heap_from_the_start(tmp_path: Path) -> None:
    """A real broker with the soak's JVM options is resident at its full heap once up, so
    the soak's RSS series of the broker can only move with what lies outside the heap;
    the live heap series sees inside it."""
    options = Lifecycle.broker_jvm_options()
    assert {"-Xms512m", "-Xmx512m", "-XX:+AlwaysPreTouch"} <= set(options)
    assert not {"-Xms128m"} & set(options)
    with EmbeddedBroker(log_path=tmp_path / "broker.log", jvm_options=options) as broker:
        pid = broker.pid
        assert pid is not None
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert b"-XX:+AlwaysPreTouch" in cmdline and b"-Xms512m" in cmdline
        usage = read_usage(pid)
        assert usage is not None and usage.rss_bytes >= 512 * MB_BYTES
        # its live heap, after a full collection: what its objects hold, well under the heap
        live = live_heap_bytes(pid)
        assert live is not None and MB_BYTES < live < 512 * MB_BYTES
    assert live_heap_bytes(pid) is None  # gone: no figure, no error


def test_the_workers_memory_is_sampled_from_its_metrics_by_table(tmp_path: Path) -> None:
    """The worker's own gauges, served as its /metrics serves them, summed over buckets
    and jobs (and the process's Arrow memory); a worker that does not answer is a
    recorded error and no values."""
    from prometheus_client import CollectorRegistry, start_http_server

    from bridge.worker.metrics import WorkerMetrics
    from logstore.localhost import free_port

    registry = CollectorRegistry()
    metrics = WorkerMetrics("w1", registry)
    metrics.lookup_cache_bytes.labels("bench.orders", "w1").set(30 * MB_BYTES)
    metrics.memtable_bytes.labels("bench.orders", "0", "w1").set(2 * MB_BYTES)
    metrics.memtable_bytes.labels("bench.orders", "1", "w1").set(1 * MB_BYTES)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        collector = Collector(Places.of(tmp_path, tmp_path), {}, time.time(), lambda: None)
        values: dict[str, float | None] = {}
        errors: list[str] = []
        collector._worker(f"http://127.0.0.1:{port}", values, errors)
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert errors == []
    arrow = values.pop("worker/process/arrow_mb")  # the process's, whatever it holds now
    assert arrow is not None and arrow >= 0
    assert values == {"worker/orders/cache_mb": 30.0, "worker/orders/memtable_mb": 3.0}
    gone: dict[str, float | None] = {}
    collector._worker(f"http://127.0.0.1:{port}", gone, errors)
    # one GET per sample for every family, so one error for a worker that does not answer
    assert gone == {} and len(errors) == 1 and errors[0].startswith("worker /metrics: ")


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_soak_runs_at_tiny_scale_with_its_lifecycle(tmp_path: Path) -> None:
    """The whole soak for half a minute through a real broker, the worker and Spark: it
    samples the worker's memory by table, the MetaService keeps the lifecycle's barriers,
    and the final tables equal the oracle. Half a minute is too short for every verdict to
    hold, so the run's own pass or fail is not asserted, only that it was not interrupted."""
    from bench.soak.__main__ import main

    work, out, html = tmp_path / "work", tmp_path / "soak.json", tmp_path / "soak.html"
    code = main([
        "--minutes", "0.5", "--sample-seconds", "5", "--rate", "200", "--initial", "500",
        "--settle-timeout", "5", "--start-timeout", "400",
        "--work", str(work), "--out", str(out), "--html", str(html),
    ])  # fmt: skip
    assert code in (0, 1)
    result = json.loads(out.read_text())
    assert result["final"]["ok"], result["final"]
    assert result["consistency"]["reads"] > 0 and result["consistency"]["disagreed"] == 0
    assert result["lifecycle"]["meta_keep_barriers"] == 360  # 3 x 120 s at 1 s
    meta_log = (work / "dts" / "logs" / "metaservice.log").read_text()
    assert "the newest 360 of each table kept" in meta_log
    sampled = [s["values"] for s in result["samples"]]
    for series in ("worker/orders/cache_mb", "worker/orders/memtable_mb"):
        assert any(v.get(series) is not None for v in sampled), series
    assert "worker/orders/cache_mb" in html.read_text()
    # every sample has each process's threads by name, and they add up to its count
    last = result["samples"][-1]
    assert "tokio-rt-worker" in last["threads"]["probe"]  # polars' reader
    for proc, names in last["threads"].items():
        # read together: Spark's JVM (hundreds of threads) starts and ends some all the time
        assert sum(names.values()) == last["values"][f"process/{proc}/threads"], proc
    assert any(line.startswith("- threads by name") for line in result["summary"])
