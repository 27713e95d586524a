"""MetaService (FLIP-276): jobs, lineage, per-table completed barriers, consistent versions.

- :mod:`bridge.meta.store` — the service's state (facade over `db`, `job_store`, `barrier_store`, `table_views`: SQL on SQLite under the warehouse, or PostgreSQL)
- :mod:`bridge.meta.server` — ``create_app(store)``, the HTTP API
- :mod:`bridge.meta.client` — ``MetaClient(url)``, one method per call
- :mod:`bridge.meta.consistency` / :mod:`bridge.meta.graph` / :mod:`bridge.meta.lag_trace` — the logic, pure
- :mod:`bridge.meta.versions` — what a consistent read answers (dataclasses, no pydantic)
- :mod:`bridge.meta.rebuild` — reload barriers from the FileStore

Imports within bridge: bridge.errors, bridge.lazy_exports.
"""

from typing import TYPE_CHECKING

from bridge.lazy_exports import lazy_exports

if TYPE_CHECKING:  # for type checkers: the names below, without importing them at run time
    from bridge.meta.errors import CycleError as CycleError
    from bridge.meta.errors import JobNotFound as JobNotFound
    from bridge.meta.errors import JobNotRunning as JobNotRunning
    from bridge.meta.errors import MetaError as MetaError
    from bridge.meta.errors import MetaUnavailable as MetaUnavailable
    from bridge.meta.errors import NoConsistentVersion as NoConsistentVersion
    from bridge.meta.errors import TableNotRegistered as TableNotRegistered
    from bridge.meta.errors import WriterConflict as WriterConflict
    from bridge.meta.models import Job as Job
    from bridge.meta.models import JobKind as JobKind
    from bridge.meta.models import JobState as JobState
    from bridge.meta.models import SinkRole as SinkRole
    from bridge.meta.versions import ConsistencyMode as ConsistencyMode
    from bridge.meta.versions import ConsistentVersion as ConsistentVersion

# Imported on first use, not with the package: importing any bridge.meta module imports
# this one first, and the pydantic models must not come along with bridge.meta.errors or
# bridge.meta.consistency (a Spark driver with only dynamic-table-storage[spark] imports those).
_EXPORTS = {
    **dict.fromkeys(
        [
            "CycleError",
            "JobNotFound",
            "JobNotRunning",
            "MetaError",
            "MetaUnavailable",
            "NoConsistentVersion",
            "TableNotRegistered",
            "WriterConflict",
        ],
        "bridge.meta.errors",
    ),
    **dict.fromkeys(["Job", "JobKind", "JobState", "SinkRole"], "bridge.meta.models"),
    **dict.fromkeys(["ConsistencyMode", "ConsistentVersion"], "bridge.meta.versions"),
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
