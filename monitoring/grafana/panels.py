"""What the Grafana dashboards show: every panel's title, PromQL, unit and description.

This is the one place the dashboards' expressions live. layout.py turns these
descriptions into grafana-foundation-sdk builders (positions, ids, datasource) and
build_dashboards.py writes the JSON files Grafana provisions; tests/bridge/monitoring
reads every expression back from those files and evaluates it on a live Prometheus, so an
expression must use only metrics some component exports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

TABLE = 'table=~"$table"'
GROUP = 'group=~"$group"'


@dataclass(frozen=True)
class Panel:
    title: str
    targets: list[tuple[str, str]]  # (PromQL, legend)
    unit: str = "short"  # a Grafana unit id
    description: str = ""
    # A table queries one value per series (instant), side by side, sorted by the first query.
    kind: Literal["timeseries", "table"] = "timeseries"
    width: int = 12  # grid columns of 24


@dataclass(frozen=True)
class Variable:
    """A dashboard variable listing the values of ``label`` on ``metric``."""

    name: str
    metric: str
    label: str


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    rows: list[tuple[str, list[Panel]]] = field(default_factory=list)  # (row title, panels)
    table_source: str = "dts_filestore_data_files"  # metric whose `table` label lists tables
    extra_variables: list[Variable] = field(default_factory=list)


CONSISTENCY = Dashboard(
    uid="dts-consistency",
    title="DTS / Consistency",
    description="Barrier progress per table and how far tables of a group diverge (FLIP-276).",
    rows=[
        (
            "Barriers",
            [
                Panel(
                    "Latest committed barrier per table",
                    [(f"dts_filestore_latest_barrier_ms{{{TABLE}}}", "{{table}}")],
                    unit="dateTimeAsIso",
                    description="Barrier id (epoch ms) of each table's newest snapshot carrying one.",
                ),
                Panel(
                    "Barrier committed by the worker / seen per bucket",
                    [
                        (f"dts_worker_barrier_last_committed_id{{{TABLE}}}", "{{table}} committed"),
                        (
                            f"min by (table) (dts_worker_barrier_last_seen_id{{{TABLE}}})",
                            "{{table}} seen by every bucket",
                        ),
                    ],
                    unit="dateTimeAsIso",
                    description="A barrier is complete once every bucket has passed its marker.",
                ),
                Panel(
                    "Barrier lag per table",
                    [(f"dts_filestore_latest_barrier_age_ms{{{TABLE}}}", "{{table}}")],
                    unit="ms",
                    description="Now minus the latest committed barrier: how stale a read of the table is.",
                ),
                Panel(
                    "Barrier spread across the selected tables",
                    [
                        (
                            f"max(dts_filestore_latest_barrier_ms{{{TABLE}}})"
                            f" - min(dts_filestore_latest_barrier_ms{{{TABLE}}})",
                            "newest - oldest",
                        )
                    ],
                    unit="ms",
                    description="How far the newest table of the group is ahead of the oldest.",
                ),
                Panel(
                    "Barrier lag in barrier intervals",
                    [
                        (
                            f"dts_filestore_latest_barrier_age_ms{{{TABLE}}}"
                            f" / dts_filestore_barrier_interval_ms{{{TABLE}}}",
                            "{{table}}",
                        )
                    ],
                    description="Intervals since the last committed barrier (alert above 10).",
                ),
            ],
        ),
        (
            "Table groups (MetaService)",
            [
                Panel(
                    "Consistent barrier per table group",
                    [
                        (
                            f"max by (group) (dts_meta_group_consistent_barrier_ms{{{GROUP}}})",
                            "{{group}}",
                        )
                    ],
                    unit="dateTimeAsIso",
                    description="The greatest barrier every table of the lineage group "
                    "completed: where a strong consistent read of the group reads.",
                ),
                Panel(
                    "Consistent read age per table group",
                    [
                        (
                            "time() * 1000 - max by (group) "
                            f"(dts_meta_group_consistent_barrier_ms{{{GROUP}}})",
                            "{{group}}",
                        )
                    ],
                    unit="ms",
                    description="Now minus the group's consistent barrier: how old the data of "
                    "a strong consistent read is.",
                ),
                Panel(
                    "Consistent lag per table",
                    [
                        (
                            "max by (group, table) "
                            f"(dts_meta_consistent_lag_ms{{{GROUP}, {TABLE}}})",
                            "{{group}}: {{table}}",
                        )
                    ],
                    unit="ms",
                    description="How far the group's consistent barrier trails each table's "
                    "latest: newer data of the table a consistent read cannot see yet. The "
                    "table at 0 is the one holding the group back (alert above 60 s).",
                ),
                Panel(
                    "Completed barrier per table (MetaService)",
                    [
                        (
                            f"max by (table) (dts_meta_table_completed_barrier_ms{{{TABLE}}})",
                            "{{table}}",
                        )
                    ],
                    unit="dateTimeAsIso",
                    description="Latest completed barrier each committer reported.",
                ),
                Panel(
                    "Tables in lineage order",
                    [
                        (
                            "max by (group, table) "
                            f"(dts_meta_table_lineage_depth{{{GROUP}, {TABLE}}})",
                            "{{table}}",
                        ),
                        (
                            "max by (group, table) "
                            f"(dts_meta_consistent_lag_ms{{{GROUP}, {TABLE}}})",
                            "{{table}}",
                        ),
                    ],
                    kind="table",
                    width=24,
                    description="Each group's tables by lineage depth (0 = source table) with "
                    "their consistent lag in ms; sort by depth for lineage order.",
                ),
            ],
        ),
        (
            "Jobs (MetaService)",
            [
                Panel(
                    "Jobs by state",
                    [("max by (state) (dts_meta_jobs)", "{{state}}")],
                    description="Registered jobs: running, finished, failed, cancelled.",
                ),
                Panel(
                    "Heartbeat age / timeout per running job",
                    [
                        (
                            "max by (job) (dts_meta_jobs_heartbeat_age_seconds"
                            " / dts_meta_jobs_heartbeat_timeout_seconds)",
                            "{{job}}",
                        )
                    ],
                    unit="percentunit",
                    description="At 1.0 the MetaService marks the job failed (alert at 0.5).",
                ),
                Panel(
                    "MetaService requests per second",
                    [
                        (
                            "sum by (route, status) "
                            "(rate(dts_meta_requests_total[$__rate_interval]))",
                            "{{route}} {{status}}",
                        )
                    ],
                    unit="reqps",
                ),
            ],
        ),
    ],
    extra_variables=[Variable("group", "dts_meta_group_consistent_barrier_ms", "group")],
)

PIPELINE = Dashboard(
    uid="dts-pipeline",
    title="DTS / Pipeline",
    description="What flows from the log into the FileStore: throughput, freshness, lag, DLQ.",
    table_source="dts_worker_records_in_total",
    rows=[
        (
            "Throughput",
            [
                Panel(
                    "Records in / out per second",
                    [
                        (
                            f"sum by (table) (rate(dts_worker_records_in_total{{{TABLE}}}[$__rate_interval]))",
                            "{{table}} in",
                        ),
                        (
                            f"sum by (table) (rate(dts_worker_records_out_total{{{TABLE}}}[$__rate_interval]))",
                            "{{table}} out",
                        ),
                    ],
                    unit="rps",
                    description="Log records consumed and rows handed to the FileStore writer.",
                ),
                Panel(
                    "Dead-lettered records (5m)",
                    [
                        (
                            f"sum by (table) (increase(dts_worker_dlq_records_total{{{TABLE}}}[5m]))",
                            "{{table}}",
                        )
                    ],
                    description="Undecodable records sent to the DLQ; any is worth a look (alert).",
                ),
            ],
        ),
        (
            "Freshness and lag",
            [
                Panel(
                    "Freshness p50 / p99 (consumer lag, 5m)",
                    [
                        (
                            f"max by (table) (quantile_over_time(0.5, dts_worker_consumer_lag_ms{{{TABLE}}}[5m]))",
                            "{{table}} p50",
                        ),
                        (
                            f"max by (table) (quantile_over_time(0.99, dts_worker_consumer_lag_ms{{{TABLE}}}[5m]))",
                            "{{table}} p99",
                        ),
                    ],
                    unit="ms",
                    description="Age of the data the worker is processing, worst bucket per table.",
                ),
                Panel(
                    "Consumer lag (records)",
                    [
                        (
                            f"sum by (table) (dts_worker_consumer_lag_records{{{TABLE}}})",
                            "{{table}}",
                        )
                    ],
                    description="Records between the worker's position and the log end.",
                ),
                Panel(
                    "Commit duration p50 / p99",
                    [
                        (
                            "histogram_quantile(0.5, sum by (le, table) "
                            f"(rate(dts_worker_commit_duration_seconds_bucket{{{TABLE}}}[$__rate_interval])))",
                            "{{table}} p50",
                        ),
                        (
                            "histogram_quantile(0.99, sum by (le, table) "
                            f"(rate(dts_worker_commit_duration_seconds_bucket{{{TABLE}}}[$__rate_interval])))",
                            "{{table}} p99",
                        ),
                    ],
                    unit="s",
                    description="Time to commit one barrier's snapshot.",
                ),
                Panel(
                    "Memtable bytes",
                    [(f"sum by (table) (dts_worker_memtable_bytes{{{TABLE}}})", "{{table}}")],
                    unit="bytes",
                    description="Rows buffered since the last prepare, per table.",
                ),
                Panel(
                    "FileStore freshness (latest committed barrier age)",
                    [(f"dts_filestore_latest_barrier_age_ms{{{TABLE}}}", "{{table}}")],
                    unit="ms",
                ),
                Panel(
                    "Commit lookups: files from the cache",
                    [
                        (
                            "sum by (table) (rate(dts_worker_lookup_cache_reads_total"
                            f'{{{TABLE},result="hit"}}[$__rate_interval])) / sum by (table) '
                            f"(rate(dts_worker_lookup_cache_reads_total{{{TABLE}}}[$__rate_interval]))",
                            "{{table}}",
                        )
                    ],
                    unit="percentunit",
                    description="Share of the data files the commits' changelog lookups read "
                    "that were already decoded in memory; a low share on a busy table: raise "
                    "lookup.cache-max-memory-size.",
                ),
                Panel(
                    "Commit lookups: cache bytes",
                    [(f"sum by (table) (dts_worker_lookup_cache_bytes{{{TABLE}}})", "{{table}}")],
                    unit="bytes",
                    description="Decoded data files kept per table (bounded by "
                    "lookup.cache-max-memory-size).",
                ),
            ],
        ),
    ],
)

STORAGE = Dashboard(
    uid="dts-storage",
    title="DTS / Storage",
    description="The FileStore's LSM shape per table: sorted runs, compaction, files, bytes, "
    "snapshots and expiration.",
    rows=[
        (
            "LSM",
            [
                Panel(
                    "Sorted runs per bucket",
                    [(f"dts_filestore_sorted_runs{{{TABLE}}}", "{{table}} / {{bucket}}")],
                    description="Writers stall at the stop trigger; compaction keeps this low.",
                ),
                Panel(
                    "Sorted runs / stop trigger",
                    [
                        (
                            f"max by (table) (dts_filestore_sorted_runs{{{TABLE}}})"
                            f" / on (table) dts_filestore_sorted_runs_stop_trigger{{{TABLE}}}",
                            "{{table}}",
                        )
                    ],
                    unit="percentunit",
                    description="1.0 = the worst bucket's writer stalls (alert at 0.8).",
                ),
            ],
        ),
        (
            "Compaction",
            [
                Panel(
                    "Compactions (1h)",
                    [
                        (
                            f"increase(dts_filestore_compactions_total{{{TABLE}}}[1h])",
                            "{{table}}",
                        )
                    ],
                    description="COMPACT snapshots committed (auto-compaction after commits, "
                    "or `dts table compact`).",
                ),
                Panel(
                    "Bytes written by compaction per second",
                    [
                        (
                            "rate(dts_filestore_compaction_written_bytes_total"
                            f"{{{TABLE}}}[$__rate_interval])",
                            "{{table}}",
                        )
                    ],
                    unit="Bps",
                    description="Write amplification from compaction: compare with the data "
                    "bytes the table holds.",
                ),
            ],
        ),
        (
            "Files",
            [
                Panel(
                    "Live data files",
                    [(f"dts_filestore_data_files{{{TABLE}}}", "{{table}}")],
                ),
                Panel(
                    "Live data bytes",
                    [(f"dts_filestore_data_bytes{{{TABLE}}}", "{{table}}")],
                    unit="bytes",
                ),
                Panel(
                    "Snapshots retained",
                    [(f"dts_filestore_snapshots_retained{{{TABLE}}}", "{{table}}")],
                    description="Falls when expiration removes snapshots.",
                ),
                Panel(
                    "Snapshots expired",
                    [(f"dts_filestore_snapshots_expired{{{TABLE}}}", "{{table}}")],
                    description="Snapshots removed by expiration so far (ids below the "
                    "earliest retained one); their unreferenced files went with them.",
                ),
                Panel(
                    "Exporter scrape time and table errors",
                    [
                        ("dts_exporter_scrape_duration_seconds", "scrape seconds"),
                        ("sum(dts_exporter_table_errors_total) or vector(0)", "table errors"),
                    ],
                ),
            ],
        ),
    ],
)

# monitoring/grafana/dashboards/<name>.json -> the dashboard it holds
DASHBOARDS = {"consistency": CONSISTENCY, "pipeline": PIPELINE, "storage": STORAGE}
