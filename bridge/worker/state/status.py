"""Per-table and per-bucket status the worker reports on ``/status``."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class BucketStatus:
    bucket: int
    owned: bool = False
    next_offset: int = 0
    high_watermark: int | None = None
    last_barrier_seen: int | None = None
    last_barrier_prepared: int | None = None
    last_record_ts_ms: int | None = None
    memtable_bytes: int = 0
    memtable_rows: int = 0
    stall_seconds: float = 0.0  # FileStore writer stalls (consumption paused meanwhile)
    # transactional logs: the commit control record after a marker takes an offset
    # that no consumer ever sees, so it does not count as lag
    after_txn_marker: bool = False

    @property
    def lag_records(self) -> int | None:
        if self.high_watermark is None:
            return None
        return max(self.high_watermark - self.next_offset - int(self.after_txn_marker), 0)

    def lag_ms(self, now_ms: int | None = None) -> int:
        """Age of the last record processed while behind; 0 once caught up."""
        lag = self.lag_records
        if not lag or self.last_record_ts_ms is None:
            return 0
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        return max(now_ms - self.last_record_ts_ms, 0)


@dataclass
class TableHealth:
    """Errors of a table's data path or commits. The worker retries by itself with a
    growing delay; ``healthy`` turns true again on the first success."""

    healthy: bool = True
    errors_total: int = 0
    consecutive_failures: int = 0
    last_error: str | None = None
    failing_stage: str | None = None  # "data" (fetch, decode, write) or "commit"
    retry_at: float | None = None  # time.monotonic() of the next attempt
    max_backoff_s: float = 5.0

    def failed(self, stage: str, exc: BaseException) -> float:
        """Record a failure; returns the seconds to wait before retrying."""
        self.healthy = False
        self.errors_total += 1
        self.consecutive_failures += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        self.failing_stage = stage
        backoff = min(0.25 * 2 ** (self.consecutive_failures - 1), self.max_backoff_s)
        self.retry_at = time.monotonic() + backoff
        return backoff

    def succeeded(self, stage: str) -> None:
        if self.failing_stage not in (None, stage):
            return  # the other stage is still failing
        self.healthy = True
        self.consecutive_failures = 0
        self.failing_stage = None
        self.retry_at = None

    def due(self, now: float | None = None) -> bool:
        return self.retry_at is not None and (now or time.monotonic()) >= self.retry_at

    def to_json(self) -> dict[str, Any]:
        retry = None if self.retry_at is None else max(self.retry_at - time.monotonic(), 0.0)
        return {
            "healthy": self.healthy,
            "errors_total": self.errors_total,
            "failing_stage": self.failing_stage,
            "last_error": self.last_error,
            "retry_in_s": None if retry is None else round(retry, 3),
        }


@dataclass
class TableStatus:
    table: str
    topic: str
    num_buckets: int
    last_barrier_committed: int | None = None
    last_commit_ms: int | None = None
    committer: bool = False
    dlq_records: int = 0
    buckets: dict[int, BucketStatus] = field(default_factory=dict)
    health: TableHealth = field(default_factory=TableHealth)

    def bucket(self, b: int) -> BucketStatus:
        if b not in self.buckets:
            self.buckets[b] = BucketStatus(b)
        return self.buckets[b]

    @property
    def last_barrier_seen(self) -> int | None:
        seen = [
            s.last_barrier_seen for s in self.buckets.values() if s.last_barrier_seen is not None
        ]
        return max(seen) if seen else None

    def to_json(self) -> dict[str, Any]:
        now = int(time.time() * 1000)
        owned = [s for s in self.buckets.values() if s.owned]
        lags = [s.lag_records for s in owned if s.lag_records is not None]
        return {
            "table": self.table,
            "topic": self.topic,
            "buckets_total": self.num_buckets,
            "committer": self.committer,
            "last_barrier_seen": self.last_barrier_seen,
            "last_barrier_committed": self.last_barrier_committed,
            "last_commit_ms": self.last_commit_ms,
            "lag_records": sum(lags) if lags else None,
            "lag_ms": max((s.lag_ms(now) for s in owned), default=0),
            "memtable_bytes": sum(s.memtable_bytes for s in owned),
            "dlq_records": self.dlq_records,
            **self.health.to_json(),
            "buckets": [
                {**asdict(s), "lag_records": s.lag_records, "lag_ms": s.lag_ms(now)}
                for _, s in sorted(self.buckets.items())
                if s.owned
            ],
        }


@dataclass
class WorkerStatus:
    job: str
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    tables: dict[str, TableStatus] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "started_ms": self.started_ms,
            "tables": {name: t.to_json() for name, t in sorted(self.tables.items())},
        }
