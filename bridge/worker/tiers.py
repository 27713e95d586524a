"""Binds table workers to the real tiers: the FileStore catalog and the LogStore."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import Any

from bridge.tables import log_spec_for
from bridge.worker.bucket import BucketNormalizer
from bridge.worker.config import WorkerConfig
from bridge.worker.errors import NoTablesError, TableSchemaChanged
from bridge.worker.metrics import WorkerMetrics
from bridge.worker.prepared import PreparedStore
from bridge.worker.state.status import TableStatus, WorkerStatus
from bridge.worker.table_worker import (
    BarrierListener,
    ResumePoint,
    TableHooks,
    TableWorker,
)
from filestore import Catalog, CommitMessage, Snapshot, Table
from logstore.dlq import DeadLetterQueue
from logstore.errors import TopicError
from logstore.normalize import Normalizer
from logstore.records import LogRecords, decode_log_records
from logstore.spec import LogSpec
from logstore.topics import ensure_topic

log = logging.getLogger(__name__)

# merge engines whose merge needs the before-image of an update (a -U row)
_RETRACTING_ENGINES = ("partial-update", "aggregation")


class TopicGate:
    """Creates each table's topic (partitions = buckets, the table's topic settings)
    before the worker subscribes to it, and remembers the tables it had to refuse.

    Subscribing to a topic that does not exist lets a broker with auto-creation make it
    with its default partition count, which breaks partition = bucket for good; so the
    worker creates it first, exactly as the table's LogWriter would. An existing topic
    with another partition count refuses the table (logged and counted once per reason);
    the other tables go on, and a refused table is tried again by the next catalog scan.
    """

    def __init__(self, bootstrap: str, metrics: WorkerMetrics) -> None:
        self.bootstrap = bootstrap
        self.metrics = metrics
        self.refused: dict[str, str] = {}

    def admit(self, tables: Sequence[Table]) -> list[Table]:
        """The tables whose topic exists (created if absent) with the right partition count."""
        ready = []
        for table in tables:
            try:
                ensure_topic(self.bootstrap, log_spec_for(table))
            except TopicError as exc:
                self._refuse(table.name, str(exc))
                continue
            if self.refused.pop(table.name, None) is not None:
                log.info("table %s: its topic is usable now", table.name)
            ready.append(table)
        return ready

    def _refuse(self, name: str, reason: str) -> None:
        if self.refused.get(name) == reason:
            return  # already logged and counted; the scan retries it quietly
        self.refused[name] = reason
        self.metrics.tables_refused.labels(name, self.metrics.job).inc()
        log.error("table %s refused, the other tables go on: %s", name, reason)


def resume_point(table: Table) -> ResumePoint:
    """The latest snapshot that records log offsets, and those offsets (bucket -> next)."""
    snap = table.latest_snapshot()
    if snap is not None and snap.log_offsets is None:
        # e.g. a compaction snapshot without offsets on top: walk back to one that has them
        snap = _latest_with_offsets(table, snap.id - 1)
    if snap is None or not snap.log_offsets:
        return ResumePoint({}, None)
    return ResumePoint({int(b): int(o) for b, o in snap.log_offsets.items()}, snap.id)


def resume_offsets(table: Table) -> dict[int, int]:
    """bucket -> next log offset recorded by the latest snapshot that has offsets."""
    return resume_point(table).offsets


def _latest_with_offsets(table: Table, start_id: int) -> Snapshot | None:
    """Newest snapshot at or below ``start_id`` with log offsets, reading one at a time
    (not every snapshot of a long-lived table)."""

    walk = table.snapshot_manager.iter_backwards(start=start_id)
    return next((snap for snap in walk if snap.log_offsets is not None), None)


def snapshot_id_at(table: Table, barrier: int) -> int | None:
    snap = table.snapshot_for_barrier(barrier)
    return None if snap is None else int(snap.id)


def needs_full_changelog(table: Table, spec: LogSpec) -> bool:
    """An upsert-mode log stores no -U and may store key-only -D; merge engines that
    retract (partial-update, aggregation) and changelog-producer=input need both
    images, so the worker rebuilds them from per-bucket state."""
    if spec.effective_changelog_mode != "upsert":
        return False
    opts = table.options
    return opts.merge_engine in _RETRACTING_ENGINES or opts.changelog_producer == "input"


def needs_normalize(table: Table, spec: LogSpec) -> bool:
    """Whether the worker keeps per-bucket state: for a full changelog, or to fill in the
    values a Debezium source did not send (log.unavailable-values=keep-current)."""
    return needs_full_changelog(table, spec) or spec.unavailable_values == "keep-current"


def new_normalizer(
    table: Table, spec: LogSpec, bucket: int, snapshot_id: int | None, state_rows: int
) -> BucketNormalizer:
    """A Normalizer whose state is the bucket's rows at ``snapshot_id`` (the resume point)."""
    normalizer = Normalizer(
        spec,
        max_rows_in_memory=state_rows,
        full_changelog=needs_full_changelog(table, spec),
    )
    if snapshot_id is not None:
        normalizer.seed(table.read_bucket(bucket, snapshot_id, spec.schema.names))
    return normalizer


def table_names(catalog: Catalog, wanted: Sequence[str] | None) -> list[str]:
    if wanted:
        return list(wanted)
    names: list[str] = []
    for db in catalog.list_databases():
        for t in catalog.list_tables(db):
            name = getattr(t, "name", t)
            names.append(name if "." in name else f"{db}.{name}")
    return names


def _has_log(table: Table) -> bool:
    return bool(table.options.change_tracking)


def build_table_worker(
    table: Table,
    config: WorkerConfig,
    metrics: WorkerMetrics,
    status: WorkerStatus,
    on_barrier: BarrierListener | None = None,
) -> TableWorker:
    spec = log_spec_for(table)
    dlq: DeadLetterQueue | None = None

    def send_to_dlq(failures: Sequence[Any]) -> None:
        nonlocal dlq
        if dlq is None:
            dlq = DeadLetterQueue(config.bootstrap, spec)
        dlq.send(failures, source_topic=spec.topic)
        dlq.flush()

    def decode(records: LogRecords) -> Any:
        """Every record the table cannot take is a dead letter with its reason; columns
        the table gained since this worker opened it reopen it with the new schema."""
        nonlocal spec
        decoded = decode_log_records(records, spec, lenient=True, unknown_columns="dead-letter")
        if decoded.unknown_columns:
            fresh = log_spec_for(table)  # the table's latest schema
            gained = (decoded.unknown_columns & set(fresh.schema.names)) - set(spec.schema.names)
            if gained:
                spec = fresh
                raise TableSchemaChanged(
                    f"table {table.name}: the log carries new columns {sorted(gained)} the "
                    "table has gained; reopening from the last snapshot with the new schema"
                )
        return decoded

    normalize = needs_normalize(table, spec)
    if normalize:
        log.info("table %s: the log is normalized from per-bucket state", table.name)
    hooks = TableHooks(
        new_write=lambda: table.new_write(config.commit_user),
        new_commit=lambda: table.new_commit(config.commit_user),
        resume=lambda: resume_point(table),
        decode=decode,
        encode_message=lambda m: m.to_json(),
        decode_message=CommitMessage.from_json,
        send_to_dlq=send_to_dlq,
        new_normalizer=(
            (lambda b, sid: new_normalizer(table, spec, b, sid, config.normalize_state_rows))
            if normalize
            else None
        ),
        snapshot_id_at=lambda b: snapshot_id_at(table, b),
        lookup_cache=lambda: table.file_cache,
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
        on_barrier=on_barrier,
    )


def discover_tables(catalog: Catalog, config: WorkerConfig, known: Collection[str]) -> list[Table]:
    """Tables with a log tier this worker should consume and does not yet."""
    found = []
    for name in table_names(catalog, config.tables):
        if name in known:
            continue
        table = catalog.get_table(name)
        if not _has_log(table):
            continue
        found.append(table)
    return found


def build_table_workers(
    config: WorkerConfig,
    metrics: WorkerMetrics,
    status: WorkerStatus,
    on_barrier: BarrierListener | None = None,
    gate: TopicGate | None = None,
) -> list[TableWorker]:

    gate = gate or TopicGate(config.bootstrap, metrics)
    catalog = Catalog(config.warehouse)
    workers = [
        build_table_worker(table, config, metrics, status, on_barrier)
        for table in gate.admit(discover_tables(catalog, config, ()))
    ]
    if not workers:
        refused = "".join(f"; {name} refused: {why}" for name, why in gate.refused.items())
        raise NoTablesError(
            f"no table with a log tier in warehouse {config.warehouse}"
            + (f" among {', '.join(config.tables)}" if config.tables else "")
            + (refused or "; create one with `dts table create` first")
        )
    return workers
