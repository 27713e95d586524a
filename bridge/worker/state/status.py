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
class StageFailure:
    """A stage ("data": fetch, decode, write; "commit") that is failing, and when to retry."""

    consecutive: int
    error: str
    retry_at: float  # time.monotonic()
    retrying: bool = False  # the retry is under way: its outcome decides what comes next


@dataclass
class TableHealth:
    """Errors of a table's data path and commits. The worker retries each failing
    stage by itself with a growing delay; the table is healthy again once every
    stage succeeded."""

    errors_total: int = 0
    last_error: str | None = None
    failing: dict[str, StageFailure] = field(default_factory=dict)
    max_backoff_s: float = 5.0

    @property
    def healthy(self) -> bool:
        return not self.failing

    def failed(self, stage: str, exc: BaseException) -> float:
        """Record a failure; returns the seconds to wait before retrying the stage."""
        prev = self.failing.get(stage)
        n = prev.consecutive + 1 if prev else 1
        backoff = min(0.25 * 2.0 ** (n - 1), self.max_backoff_s)
        self.errors_total += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        self.failing[stage] = StageFailure(n, self.last_error, time.monotonic() + backoff)
        return backoff

    def succeeded(self, stage: str) -> bool:
        """The stage worked; True if it was failing until now."""
        return self.failing.pop(stage, None) is not None

    def is_failing(self, stage: str) -> bool:
        return stage in self.failing

    def due(self, stage: str) -> bool:
        """The stage is failing, not being retried, and its backoff has passed."""
        f = self.failing.get(stage)
        return f is not None and not f.retrying and time.monotonic() >= f.retry_at

    def retrying(self, stage: str) -> None:
        """A retry of the failing stage is under way (its failure count stays)."""
        f = self.failing.get(stage)
        if f is not None:
            f.retrying = True

    def blocked(self, stage: str) -> bool:
        """The stage failed and waits for its retry."""
        f = self.failing.get(stage)
        return f is not None and not f.retrying

    def to_json(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "healthy": self.healthy,
            "errors_total": self.errors_total,
            "last_error": self.last_error,
            "failing": {
                stage: {
                    "consecutive": f.consecutive,
                    "error": f.error,
                    "retry_in_s": round(max(f.retry_at - now, 0.0), 3),
                }
                for stage, f in sorted(self.failing.items())
            },
        }


@dataclass
class StallReport:
    """Why and where a table stopped progressing (``bridge.worker.stalls``)."""

    reason: str  # "<stage>: <error class>" or "no progress"
    detail: str
    positions: dict[int, int]  # partition -> the offset it stands at (-1: not opened yet)
    since_ms: int

    def to_json(self, now_ms: int) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "detail": self.detail,
            "partitions": [{"partition": p, "offset": o} for p, o in self.positions.items()],
            "since_ms": self.since_ms,
            "for_s": round(max(now_ms - self.since_ms, 0) / 1000, 1),
        }


@dataclass
class TableStatus:
    table: str
    topic: str
    num_buckets: int
    last_barrier_committed: int | None = None
    last_commit_ms: int | None = None
    committer: bool = False
    # the committer's oldest pending barrier and the buckets that have not prepared it
    commit_waits_for: tuple[int, list[int]] | None = None
    dlq_records: int = 0
    buckets: dict[int, BucketStatus] = field(default_factory=dict)
    health: TableHealth = field(default_factory=TableHealth)
    stall: StallReport | None = None

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
            "commit_waits_for": (
                None
                if self.commit_waits_for is None or not self.committer
                else {
                    "barrier": self.commit_waits_for[0],
                    "missing_buckets": self.commit_waits_for[1],
                }
            ),
            "last_barrier_seen": self.last_barrier_seen,
            "last_barrier_committed": self.last_barrier_committed,
            "last_commit_ms": self.last_commit_ms,
            "lag_records": sum(lags) if lags else None,
            "lag_ms": max((s.lag_ms(now) for s in owned), default=0),
            "memtable_bytes": sum(s.memtable_bytes for s in owned),
            "dlq_records": self.dlq_records,
            **self.health.to_json(),
            "stalled": None if self.stall is None else self.stall.to_json(now),
            "buckets": [
                {**asdict(s), "lag_records": s.lag_records, "lag_ms": s.lag_ms(now)}
                for _, s in sorted(self.buckets.items())
                if s.owned
            ],
        }


@dataclass
class LogLinkStatus:
    """Whether the worker reaches the Kafka log (``/status`` field ``log``); kept by
    ``bridge.worker.reachability.LogReachability``."""

    reachable: bool = True
    unreachable_since_ms: int | None = None
    last_error: str | None = None
    outages: int = 0

    def to_json(self, now_ms: int | None = None) -> dict[str, Any]:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        since = self.unreachable_since_ms
        return {
            "reachable": self.reachable,
            "unreachable_since_ms": since,
            "unreachable_for_s": None if since is None else round((now_ms - since) / 1000, 1),
            "last_error": self.last_error,
            "outages": self.outages,
        }


@dataclass
class WorkerStatus:
    job: str
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    tables: dict[str, TableStatus] = field(default_factory=dict)
    log: LogLinkStatus = field(default_factory=LogLinkStatus)

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "started_ms": self.started_ms,
            "log": self.log.to_json(),
            "tables": {name: t.to_json() for name, t in sorted(self.tables.items())},
        }
