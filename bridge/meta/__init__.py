"""MetaService (FLIP-276): jobs, lineage, per-table completed barriers, consistent versions.

- :mod:`bridge.meta.store` — the service's state (facade over `db`, `job_store`, `barrier_store`, `table_views`: SQL on SQLite under the warehouse, or PostgreSQL)
- :mod:`bridge.meta.server` — ``create_app(store)``, the HTTP API
- :mod:`bridge.meta.client` — ``MetaClient(url)``, one method per call
- :mod:`bridge.meta.consistency` / :mod:`bridge.meta.graph` — the logic, pure
- :mod:`bridge.meta.rebuild` — reload barriers from the FileStore

Imports within bridge: bridge.errors.
"""

from bridge.meta.errors import (
    CycleError,
    JobNotFound,
    JobNotRunning,
    MetaError,
    MetaUnavailable,
    NoConsistentVersion,
    TableNotRegistered,
    WriterConflict,
)
from bridge.meta.models import (
    ConsistencyMode,
    ConsistentVersion,
    Job,
    JobKind,
    JobState,
    SinkRole,
)

__all__ = [
    "ConsistencyMode",
    "ConsistentVersion",
    "CycleError",
    "Job",
    "JobKind",
    "JobNotFound",
    "JobNotRunning",
    "JobState",
    "MetaError",
    "MetaUnavailable",
    "NoConsistentVersion",
    "SinkRole",
    "TableNotRegistered",
    "WriterConflict",
]
