"""The series a soak samples, named ``<group>/<subject>/<metric>``, and how each metric is
judged: the smallest growth over the judged window worth failing on (``floor``: absolute,
or ``rel`` of the series' median level, whichever is larger) and which way is worse.

The floors are what noise alone would not show but a person would call a leak or a
slowdown: 16 MB of memory (a process's, or the worker's caches), 2 threads, 8 open
files, 1 MB or 5 files of a directory, 2 data files in a bucket, 2 manifests, 5 retained
change snapshots, 1 s of freshness.
"""

from __future__ import annotations

from dataclasses import dataclass

MB = 1 << 20


@dataclass(frozen=True)
class Metric:
    label: str
    floor: float = 0.0
    rel: float = 0.0
    worse: str = "up"  # "down": a falling series is the bad one
    judged: bool = True  # False: shown, not judged (a running total, the input)


METRICS = {
    "rss_mb": Metric("RSS MB", 16.0, 0.02),
    # what the worker's RSS holds, by table (its /metrics): the lookup cache's decoded
    # files, bounded by lookup.cache-max-memory-size, and the rows since the last barrier
    "cache_mb": Metric("lookup cache MB", 16.0, 0.05),
    "memtable_mb": Metric("memtable MB", 16.0, 0.05),
    "arrow_mb": Metric("Arrow allocated MB", 16.0, 0.05),
    "heap_live_mb": Metric("live heap MB", 16.0, 0.05),  # after a full collection (jvm.py)
    "cpu_cores": Metric("CPU cores", 0.05, 0.10),
    "cpu_s": Metric("CPU s (total)", judged=False),
    "threads": Metric("threads", 2.0, 0.05),
    "open_files": Metric("open files", 8.0, 0.05),
    "mb": Metric("MB", 1.0, 0.10),
    "files": Metric("files", 5.0, 0.10),
    "files_per_bucket": Metric("data files/bucket (max)", 2.0),
    "manifests": Metric("manifests/snapshot", 2.0, 0.10),
    # what expiration governs: it keeps the snapshots of the last snapshot.time-retained,
    # and a barrier that carried changes commits one, so their count is set by the barrier
    # rate; an expiration that falls behind or stops grows it by one a barrier
    "appends": Metric("change snapshots retained", 5.0, 0.10),
    # shown, not judged: a compaction commits a snapshot of its own at a barrier where any
    # bucket compacted, so how many fall within the retention depends on whether the
    # buckets compact at the same barriers. In soak run 7 the four buckets of `orders`
    # fell out of step for good at minute 27 (their files listed each minute): its
    # compaction snapshots stepped by half (62 -> 94 retained) while its change snapshots
    # stayed within 3 (113 -> 115; run 6: 89 -> 110 and 109 -> 112). At most one a barrier
    "snapshots": Metric("snapshots retained", judged=False),
    "compactions": Metric("compaction snapshots retained", judged=False),
    "p99_s": Metric("freshness p99 s", 1.0, 0.25),
    # fewer strong reads an interval: each read got slower (the tables or the MetaService's
    # answers grew)
    "reads": Metric("strong reads", 2.0, 0.25, worse="down"),
    # judged by its own rule: not one may disagree over the whole run
    "disagreed": Metric("reads disagreeing", judged=False),
    "read_errors": Metric("failed reads", judged=False),
    "changes_per_s": Metric("changes/s produced", judged=False),
    # the machine's, beside the processes': what a sample's CPU and freshness ran beside
    "load_1m": Metric("load average (1 min)", judged=False),
}


def metric_of(series: str) -> Metric:
    return METRICS[series.rsplit("/", 1)[-1]]


def key(group: str, subject: str, metric: str) -> str:
    assert metric in METRICS, metric
    return f"{group}/{subject}/{metric}"
