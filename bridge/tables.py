"""A FileStore table's log tier: its LogSpec, bucketer and writer (FileStore + LogStore composed).

``logstore`` knows nothing of ``filestore``; this module maps table options
(``log.topic``, ``bucket``, ``log.consistency``, ``log.changelog-mode``,
``log.retention``, ``barrier.interval``, ``log.replication-factor``,
``log.min-insync-replicas``) to a ``LogSpec`` and injects the
FileStore's bucket hash as the LogStore writer's ``bucketer``, so a record's
partition is its bucket on both tiers.

Imports within bridge: nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from filestore import Table
from filestore.format.bucket import bucket_ids
from logstore.errors import LogSpecError
from logstore.spec import META_COLUMNS, LogSpec, topic_settings
from logstore.writer import LogWriter

# FileStore system columns never travel on the log
_SYSTEM_PREFIXES = ("_KEY_", "_SEQUENCE_NUMBER", "_VALUE_KIND")


def _user_schema(arrow: pa.Schema) -> pa.Schema:
    return pa.schema(
        [f for f in arrow if not f.name.startswith(_SYSTEM_PREFIXES) and f.name not in META_COLUMNS]
    )


def log_spec_for(table: Table) -> LogSpec:
    """The table's LogSpec from its schema and options (``Table`` from ``filestore``)."""
    schema = table.schema
    opts = schema.core_options
    if not opts.change_tracking:
        raise LogSpecError(
            f"table {table.name} has change-tracking=false: it has no log tier (FileStore only)"
        )
    topic = topic_settings(opts.raw)  # log.replication-factor, log.min-insync-replicas
    return LogSpec(
        topic=opts.log_topic(table.name),
        schema=_user_schema(schema.arrow_schema),
        primary_key=list(schema.primary_key or []),
        buckets=int(opts.num_buckets),
        consistency=opts.log_consistency,
        changelog_mode=opts.log_changelog_mode,
        retention_ms=int(opts.log_retention_ms),
        replication_factor=topic["replication_factor"],
        min_insync_replicas=topic["min_insync_replicas"],
        unavailable_values=opts.log_unavailable_values,
    )


def bucketer_for(table: Table) -> Callable[[pa.Table], np.ndarray]:
    """The FileStore's bucket hash over the table's bucket keys (bucket-key, else pk, else all)."""
    keys = list(table.schema.bucket_keys)
    buckets = int(table.schema.num_buckets)
    return lambda rows: bucket_ids(rows, keys, buckets)


def open_log_writer(
    table: Table,
    bootstrap: str,
    transactional_id: str | None = None,
    barrier_interval_s: float | None = -1.0,
    **kwargs: Any,
) -> LogWriter:
    """A LogWriter for the table's topic; ``barrier_interval_s=-1`` means the table's option."""
    if barrier_interval_s is not None and barrier_interval_s < 0:
        barrier_interval_s = table.schema.core_options.barrier_interval_ms / 1000.0
    return LogWriter(
        bootstrap,
        log_spec_for(table),
        bucketer_for(table),
        transactional_id=transactional_id,
        barrier_interval_s=barrier_interval_s,
        **kwargs,
    )
