"""Prometheus metrics of the Faust worker (own registry, no global state).

Names follow ``dts_<part>_<what>_<unit>``; labels ``table``, ``bucket``,
``job`` (the worker deployment, i.e. its consumer group).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

_TB = ("table", "bucket", "job")
_T = ("table", "job")

COMMIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class WorkerMetrics:
    job: str
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.records_in = Counter(
            "dts_worker_records_in", "Log records consumed (data, not markers)", _TB, registry=r
        )
        self.records_out = Counter(
            "dts_worker_records_out", "Rows handed to the FileStore writer", _TB, registry=r
        )
        self.dlq_records = Counter(
            "dts_worker_dlq_records",
            "Undecodable records sent to the dead-letter queue",
            _TB,
            registry=r,
        )
        self.barrier_last_seen = Gauge(
            "dts_worker_barrier_last_seen_id",
            "Last barrier marker passed by the bucket (epoch ms)",
            _TB,
            registry=r,
        )
        self.barrier_last_committed = Gauge(
            "dts_worker_barrier_last_committed_id",
            "Last barrier committed as a snapshot (epoch ms)",
            _T,
            registry=r,
        )
        self.commit_duration = Histogram(
            "dts_worker_commit_duration_seconds",
            "Time to commit one barrier's snapshot",
            _T,
            buckets=COMMIT_BUCKETS,
            registry=r,
        )
        self.memtable_bytes = Gauge(
            "dts_worker_memtable_bytes", "Bytes buffered since the last prepare", _TB, registry=r
        )
        self.stall_seconds = Counter(
            "dts_worker_stall_seconds",
            "Time consumption was paused by backpressure",
            _TB,
            registry=r,
        )
        self.lag_records = Gauge(
            "dts_worker_consumer_lag_records",
            "Records between the bucket's position and the log end",
            _TB,
            registry=r,
        )
        self.lag_ms = Gauge(
            "dts_worker_consumer_lag_ms",
            "Age of the last processed record while the bucket is behind (0 when caught up)",
            _TB,
            registry=r,
        )
        self.tables_refused = Counter(
            "dts_worker_tables_refused",
            "Tables the worker refused to consume (e.g. their topic's partition count is not "
            "the table's bucket count); the other tables go on",
            _T,
            registry=r,
        )
        self.table_errors = Counter(
            "dts_worker_table_errors",
            "Errors while consuming or committing a table (stage: data, commit); the worker "
            "retries with backoff and resumes from the last snapshot",
            ("table", "job", "stage"),
            registry=r,
        )
        self.table_healthy = Gauge(
            "dts_worker_table_healthy",
            "1 while the table's data path and commits work, 0 while they fail and are retried",
            _T,
            registry=r,
        )
        self.table_stalled = Gauge(
            "dts_worker_table_stalled",
            "1 while the table makes no progress (a stage failing, or records waiting that "
            "none moved for the stall time); where and why: dts_worker_table_stall_offset",
            _T,
            registry=r,
        )
        self.table_stall_offset = Gauge(
            "dts_worker_table_stall_offset",
            "While the table is stalled: the log offset each partition stands at (-1: not "
            "opened yet), with the reason (stage and error, or 'no progress')",
            ("table", "job", "partition", "reason"),
            registry=r,
        )
        self.fetch_blocked = Gauge(
            "dts_worker_fetch_blocked",
            "1 while fetching waits for the table workers (backpressure)",
            ("job",),
            registry=r,
        )
        self.log_reachable = Gauge(
            "dts_worker_log_reachable",
            "1 while the worker reaches its Kafka log, 0 while no broker answers (the worker "
            "retries by itself and resumes from the last snapshot)",
            ("job",),
            registry=r,
        )
        self.log_outages = Counter(
            "dts_worker_log_outages",
            "Times the Kafka log became unreachable (no broker answered)",
            ("job",),
            registry=r,
        )

        self.meta_errors = Counter(
            "dts_worker_meta_errors",
            "Failed MetaService calls (kind: unavailable, refused, lost, dropped, error); "
            "commits go on, reports are retried",
            ("table", "job", "kind"),
            registry=r,
        )
        self.lookup_cache_bytes = Gauge(
            "dts_worker_lookup_cache_bytes",
            "Decoded data files the table's commits keep for their lookups "
            "(lookup.cache-max-memory-size bounds it)",
            _T,
            registry=r,
        )
        self.lookup_cache_reads = Counter(
            "dts_worker_lookup_cache_reads",
            "Data files the table's commit lookups read, from the cache (hit) or disk (miss)",
            ("table", "job", "result"),
            registry=r,
        )
        # what Arrow holds live, beside the process's RSS: RSS above it is the allocators'
        # (Arrow's pool, polars' jemalloc, glibc) free memory and everything else; the pool
        # names which allocator (chosen in bridge.__main__)
        self.arrow_allocated_bytes = Gauge(
            "dts_worker_arrow_allocated_bytes",
            "Bytes Arrow's default memory pool holds allocated in this process",
            ("job", "pool"),
            registry=r,
        )
        pool = pa.default_memory_pool().backend_name
        self.arrow_allocated_bytes.labels(self.job, pool).set_function(pa.total_allocated_bytes)
        self.meta_pending_reports = Gauge(
            "dts_worker_meta_pending_reports",
            "Barrier reports waiting to be sent to the MetaService",
            ("job",),
            registry=r,
        )

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
