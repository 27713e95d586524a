"""Binds table workers to the real tiers: the FileStore catalog and the LogStore."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from bridge.worker.config import WorkerConfig
from bridge.worker.metrics import WorkerMetrics
from bridge.worker.prepared import PreparedStore
from bridge.worker.state.status import TableStatus, WorkerStatus
from bridge.worker.table_worker import RawRecord, TableHooks, TableWorker

log = logging.getLogger(__name__)


class NoTablesError(RuntimeError):
    """The worker was started with nothing to consume."""


def resume_offsets(table: Any) -> dict[int, int]:
    """bucket -> next log offset recorded by the latest snapshot that has offsets."""
    snap = table.latest_snapshot()
    if snap is not None and snap.log_offsets is None:
        # e.g. a compaction snapshot without offsets on top: use the last one that has them
        snap = next((s for s in reversed(table.snapshots()) if s.log_offsets is not None), None)
    if snap is None or not snap.log_offsets:
        return {}
    return {int(b): int(o) for b, o in snap.log_offsets.items()}


def table_names(catalog: Any, wanted: Sequence[str] | None) -> list[str]:
    if wanted:
        return list(wanted)
    names: list[str] = []
    for db in catalog.list_databases():
        for t in catalog.list_tables(db):
            name = getattr(t, "name", t)
            names.append(name if "." in name else f"{db}.{name}")
    return names


def _has_log(table: Any) -> bool:
    return bool(table.options.change_tracking)


def log_spec(table: Any) -> Any:
    """``bridge.tables.log_spec_for`` (the one definition), or the same composition
    from the table's options while that module is not there."""
    try:
        from bridge.tables import log_spec_for
    except ImportError:
        from logstore.spec import LogSpec

        opts = table.options
        # nullable on the log: a debezium envelope's absent image decodes as nulls
        schema = pa.schema([f.with_nullable(True) for f in table.arrow_schema])
        return LogSpec(
            topic=opts.log_topic(table.name),
            schema=schema,
            primary_key=list(table.primary_key),
            buckets=opts.bucket,
            consistency=opts.log_consistency,
            changelog_mode=opts.log_changelog_mode,
            retention_ms=opts.log_retention_ms,
        )
    return log_spec_for(table)


def build_table_worker(
    table: Any, config: WorkerConfig, metrics: WorkerMetrics, status: WorkerStatus
) -> TableWorker:
    from filestore import CommitMessage
    from logstore.codec import decode_records
    from logstore.dlq import DeadLetterQueue

    spec = log_spec(table)
    dlq: DeadLetterQueue | None = None

    def send_to_dlq(failures: Sequence[Any]) -> None:
        nonlocal dlq
        if dlq is None:
            dlq = DeadLetterQueue(config.bootstrap, spec)
        dlq.send(failures, source_topic=spec.topic)
        dlq.flush()

    def decode(records: Sequence[RawRecord]) -> Any:
        return decode_records(records, spec, lenient=True)

    hooks = TableHooks(
        new_write=lambda: table.new_write(config.commit_user),
        new_commit=lambda: table.new_commit(config.commit_user),
        resume_offsets=lambda: resume_offsets(table),
        decode=decode,
        encode_message=lambda m: m.to_json(),
        decode_message=CommitMessage.from_json,
        send_to_dlq=send_to_dlq,
    )
    tstatus = TableStatus(table.name, spec.topic, spec.buckets)
    status.tables[table.name] = tstatus
    return TableWorker(
        table.name,
        spec.topic,
        spec.buckets,
        PreparedStore(table.io.fs, table.paths.root),
        hooks,
        metrics,
        tstatus,
        config.worker_id,
        commit_user=config.commit_user,
        transactional=spec.transactional,
    )


def build_table_workers(
    config: WorkerConfig, metrics: WorkerMetrics, status: WorkerStatus
) -> list[TableWorker]:
    from filestore import Catalog

    catalog = Catalog(config.warehouse)
    workers = []
    for name in table_names(catalog, config.tables):
        table = catalog.get_table(name)
        if not _has_log(table):
            log.info("table %s has no log tier (change-tracking=false); skipped", name)
            continue
        workers.append(build_table_worker(table, config, metrics, status))
    if not workers:
        raise NoTablesError(
            f"no table with a log tier in warehouse {config.warehouse}"
            + (f" among {', '.join(config.tables)}" if config.tables else "")
            + "; create one with `dts table create` first"
        )
    return workers
