"""Settings of one `dts worker` process."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from bridge.worker.committer import DEFAULT_COMMIT_USER


def _default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class WorkerConfig:
    warehouse: str
    bootstrap: str
    tables: list[str] | None = None  # None: every table with a log tier
    group: str = "dts-worker"  # consumer group = the worker deployment (metric label "job")
    web_host: str = "127.0.0.1"
    web_port: int = 6066
    web_enabled: bool = True
    commit_user: str = DEFAULT_COMMIT_USER
    worker_id: str = field(default_factory=_default_worker_id)
    batch_size: int = 20_000  # records per bulk fetch (consume num_messages)
    fetch_queue_batches: int = 4  # fetched batches waiting for the table workers
    prefetch_kbytes: int = 32_768  # librdkafka's prefetch queue; bounds memory under backpressure
    commit_poll_s: float = 0.1  # committer polls for other workers' prepared records
    commit_fast_poll_s: float = 0.01  # ... while a barrier waits for them
    status_poll_s: float = 1.0  # lag refresh
    # group membership: short timeouts make joins and rebalances quick
    session_timeout_s: float = 6.0
    heartbeat_interval_s: float = 0.5
    rebalance_timeout_s: float = 6.0
    datadir: str | None = None  # Faust's local state dir (nothing durable is kept there)
    # MetaService (None: run without it); jobs worker:<group>:<table>, see meta_link
    meta_url: str | None = None
    meta_heartbeat_interval_s: float = 2.0
    meta_heartbeat_timeout_ms: int | None = None  # None: the service's default
    # catalog scan for tables created after start (0: off; only without an explicit table list)
    table_scan_interval_s: float = 5.0
    resubscribe_delay_s: float = 1.0  # Faust waits this long to batch topic changes (default 45)
    normalize_state_rows: int = 1_000_000  # per bucket, in memory before spilling to disk
    # a healthy bucket with records waiting that has not moved this long counts as stalled
    stall_after_s: float = 30.0

    @property
    def request_timeout_s(self) -> float:
        """How long the group consumer waits for one broker answer (Faust's
        ``broker_request_timeout``): above the session timeout, as a group member's
        requests must be, and at least 10 s."""
        return max(self.session_timeout_s + 4, 10.0)
