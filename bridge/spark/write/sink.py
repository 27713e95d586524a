"""The `dts` sink: batch writes (append / overwrite / staged CTAS) and the streaming sink.

Tasks (executors) write data files (`bridge.spark.write._tasks.write_task`); nothing is
visible until the driver-side `commit` turns every task's `CommitMessage` into ONE
snapshot. `abort` deletes the files the tasks wrote.

Streaming: one snapshot per micro-batch, idempotent by (commit user
`spark-<query id>`, identifier = batch id), carrying the barrier of the `dts`
source offsets the batch ended at (see `bridge.spark.write._checkpoint`). In complete mode
that snapshot replaces the table (an OVERWRITE; into the log: a truncate record, then
the rows, in the barrier's transaction).

With option `meta.url` every write registers as a MetaService job
(see `bridge.spark.write.meta_jobs`).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from bridge.spark.errors import OptionError
from bridge.spark.options import BARRIER, ROW_KIND, WriteOptions
from bridge.spark.options.catalog import open_catalog, open_table, open_table_for_lookups
from bridge.spark.options.schema import spark_arrow_schema
from bridge.spark.write import meta_jobs
from bridge.spark.write._checkpoint import (
    ends_inside_barrier,
    query_id,
    source_barrier,
    source_tables,
)
from bridge.spark.write._log_sink import abort_staged, commit_to_log, stage_task
from bridge.spark.write._tasks import DtsCommitMessage, commit_messages, publish_schema, write_task
from bridge.spark.write.staged import staged_writer
from filestore.commit.properties import CommitProperties
from filestore.errors import SchemaError
from filestore.format.schema import TableSchema, evolve
from filestore.format.snapshot import CommitKind
from logstore.markers import next_barrier_id

if TYPE_CHECKING:
    from filestore import Table


def check_write_schema(table: Table, schema: StructType, opts: WriteOptions) -> TableSchema | None:
    """Driver side, before any task runs: the written columns must fit the table.

    A column the table lacks is an error, never silently dropped; with Delta's
    `mergeSchema=true` it is added as a nullable column: returns the new schema version
    the tasks write with, published only by the commit of the data
    (`_tasks.publish_schema`). `partitionBy` must match the table's.
    """
    if opts.partition_by and opts.partition_by != list(table.partition_keys):
        raise OptionError(
            f"{table.name} is partitioned by {list(table.partition_keys)}, not "
            f"{opts.partition_by}; partitioning is fixed when a table is created"
        )
    arrow = spark_arrow_schema(schema)
    known = set(table.schema.arrow_schema.names)
    extra = [f for f in arrow if f.name not in known and f.name not in (ROW_KIND, BARRIER)]
    if not extra:
        return None
    names = [f.name for f in extra]
    if not opts.merge_schema:
        raise OptionError(
            f"columns {names} are not in table {table.name} (columns: {sorted(known)}); "
            "add .option('mergeSchema', 'true') to add them as nullable columns, or drop them"
        )
    evolved = table.schema.arrow_schema
    for f in extra:
        evolved = evolved.append(pa.field(f.name, f.type, nullable=True))
    try:
        return evolve(table.schema, evolved)
    except SchemaError as e:
        raise OptionError(f"mergeSchema cannot add {names} to {table.name}: {e}") from e


def batch_writer(opts: WriteOptions, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
    """The writer for `df.write.format("dts")`: staged (CTAS/RTAS) or into an existing table."""
    if opts.create or opts.replace:
        return staged_writer(opts, schema, overwrite)
    cat = open_catalog(opts.common.warehouse)
    try:
        table = cat.get_table(opts.common.table)
    except Exception as e:
        raise OptionError(
            f"cannot write to {opts.common.table}: {e}. To create it from this DataFrame use "
            '.option("create", "true") (atomic CREATE TABLE AS SELECT)'
        ) from e
    evolved = check_write_schema(table, schema, opts)
    # registered once, here on the driver while Spark plans the write; the id is pickled
    job_id = meta_jobs.register(opts, meta_jobs.BATCH, meta_jobs.new_job_id(meta_jobs.BATCH))
    return DtsBatchWriter(opts, overwrite, job_id, evolved)


class DtsBatchWriter(DataSourceArrowWriter):
    """Append or overwrite: one atomic snapshot per Spark write job."""

    def __init__(
        self,
        opts: WriteOptions,
        overwrite: bool,
        job_id: str | None = None,
        evolved: TableSchema | None = None,
    ) -> None:
        self.opts = opts
        self.overwrite = overwrite
        self.job_id = job_id
        self.evolved = evolved  # mergeSchema: the version the tasks write, the commit publishes
        self.commit_user = opts.commit_user or job_id or f"spark-batch-{uuid.uuid4().hex}"

    def _table(self) -> Any:
        return open_table(self.opts.common.warehouse, self.opts.common.table)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DtsCommitMessage:
        meta_jobs.heartbeat(self.opts, self.job_id)
        return write_task(self._table(), self.commit_user, iterator, self.evolved)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        table = open_table_for_lookups(self.opts.common.warehouse, self.opts.common.table)
        kind = CommitKind.OVERWRITE if self.overwrite else CommitKind.APPEND
        msgs = commit_messages(list(messages))
        try:
            try:
                publish_schema(table, self.evolved)
            except BaseException:
                table.new_commit(self.commit_user).abort(msgs)
                raise
            snap = table.new_commit(self.commit_user).commit(
                msgs, CommitProperties(1, self.opts.barrier, kind=kind)
            )
        except BaseException as e:
            with contextlib.suppress(Exception):
                meta_jobs.finish(self.opts, self.job_id, failed=f"commit failed: {e}")
            raise
        meta_jobs.report(self.opts, self.job_id, snap)
        meta_jobs.finish(self.opts, self.job_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        table = self._table()
        try:
            table.new_commit(self.commit_user).abort(commit_messages(list(messages)))
        finally:
            meta_jobs.finish(self.opts, self.job_id, failed="Spark aborted the write")


class DtsStreamWriter(DataSourceStreamArrowWriter):
    """Streaming sink: one idempotent snapshot per micro-batch, carrying the source barrier."""

    def __init__(self, opts: WriteOptions, schema: StructType, overwrite: bool) -> None:
        if opts.create or opts.replace:
            raise OptionError("a streaming write cannot create a table; create it first")
        if not opts.checkpoint and not opts.commit_user:
            raise OptionError(
                'the dts streaming sink needs .option("checkpointLocation", ...) (exactly-once '
                "commits are keyed by the query id Spark keeps there)"
            )
        self.opts = opts
        # complete mode: each micro-batch is the whole result, so its commit replaces the
        # table (a group that left the result leaves the table), as Delta's sink does
        self.overwrite = overwrite
        self.commit_user = opts.commit_user or f"spark-{query_id(opts.checkpoint or '')}"
        self.evolved: TableSchema | None = None  # see DtsBatchWriter.evolved
        table = self._table()
        if opts.update_mode and not table.primary_key:
            raise OptionError(
                f"outputMode('update') into {table.name} needs a primary-key table: each "
                "micro-batch writes the groups it changed and the sink upserts them by key; "
                "into a table without one they would pile up. Write to a table with "
                "primary-key columns (the grouping columns of an aggregation), or use "
                "outputMode('complete'), which replaces the table every micro-batch"
            )
        if opts.target_tier == "file":
            self.evolved = check_write_schema(table, schema, opts)

    def _table(self) -> Any:
        return open_table(self.opts.common.warehouse, self.opts.common.table)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DtsCommitMessage:
        if self.opts.target_tier == "log":
            return stage_task(self.opts, self.commit_user, iterator)
        return write_task(self._table(), self.commit_user, iterator, self.evolved)

    def barrier_for(self, messages: list[Any], batch_id: int) -> int | None:
        """The barrier to commit for `batch_id` (see module `bridge.spark.write._checkpoint`)."""
        if self.opts.barrier is not None:
            return self.opts.barrier
        if self.opts.checkpoint:
            b = source_barrier(self.opts.checkpoint, batch_id)
            if b is not None:
                return b
        seen = [
            m.max_barrier
            for m in messages
            if isinstance(m, DtsCommitMessage) and m.max_barrier is not None
        ]
        return max(seen) if seen else None

    def _register(self, messages: list[Any], batch_id: int) -> str | None:
        """Register (re-attach) the query's MetaService job; a refusal drops the batch's files."""
        if not self.opts.common.meta_url:
            return None
        sources = source_tables(self.opts.checkpoint, batch_id) if self.opts.checkpoint else []
        try:
            return meta_jobs.register(
                self.opts,
                meta_jobs.STREAMING,
                meta_jobs.streaming_job_id(self._query_id()),
                sources,
                role=meta_jobs.LOG_WRITER if self.opts.target_tier == "log" else meta_jobs.WRITER,
            )
        except BaseException:
            with contextlib.suppress(Exception):
                self.abort(messages, batch_id)
            raise

    def _stamped_before(self, barrier: int, batch_id: int) -> bool:
        """Whether the previous micro-batch already ended at this source barrier: a batch
        of compaction snapshots only (they keep their table's barrier) completes none."""
        checkpoint = self.opts.checkpoint
        if checkpoint is None or batch_id == 0 or self.opts.barrier is not None:
            return False
        return source_barrier(checkpoint, batch_id - 1) == barrier

    def _reads_dts(self, batch_id: int) -> bool:
        """Whether the batch reads `dts` tables: their barriers are the only ones it may
        stamp (a batch of a source with no barrier yet stamps none; a made-up one would be
        newer than the source's first real barrier, which the table would then refuse)."""
        checkpoint = self.opts.checkpoint
        return checkpoint is not None and bool(source_tables(checkpoint, batch_id))

    def _query_id(self) -> str:
        if self.opts.checkpoint:
            return query_id(self.opts.checkpoint)
        return self.commit_user.removeprefix("spark-")

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        table = open_table_for_lookups(self.opts.common.warehouse, self.opts.common.table)
        # a batch holding part of a source barrier completes none: no barrier to stamp
        partial = (
            self.opts.barrier is None
            and bool(self.opts.checkpoint)
            and ends_inside_barrier(self.opts.checkpoint or "", batchId)
        )
        barrier = None if partial else self.barrier_for(list(messages), batchId)
        job_id = self._register(list(messages), batchId)
        if self.opts.target_tier == "log":
            if partial:
                abort_staged(self.opts, list(messages))
                raise OptionError(
                    f"micro-batch {batchId} ends inside a source barrier (maxOffsetsPerTrigger "
                    "cut it); a log-tier sink writes whole barriers: use maxRowsPerTrigger or "
                    "maxBarriersPerTrigger on the source, or target.tier=file"
                )
            commit_to_log(
                self.opts,
                table,
                self.commit_user,
                list(messages),
                batchId,
                barrier,
                truncate=self.overwrite,
            )
            return
        commit = table.new_commit(self.commit_user)
        msgs = commit_messages(list(messages))
        done = commit.committed_identifier()
        if done is not None and done >= batchId:
            commit.abort(msgs)  # a replayed batch: its snapshot exists; drop the duplicate files
            meta_jobs.report(self.opts, job_id, _committed(table, self.commit_user, batchId))
            return
        if barrier is not None and self._stamped_before(barrier, batchId):
            barrier = None  # only compaction snapshots: no source barrier completes here
        elif barrier is None and not partial and not self._reads_dts(batchId):
            barrier = _fresh_barrier(table)
        try:
            publish_schema(table, self.evolved)
        except BaseException:
            commit.abort(msgs)
            raise
        kind = CommitKind.OVERWRITE if self.overwrite else CommitKind.APPEND
        snap = commit.commit(msgs, CommitProperties(batchId, barrier, kind=kind))
        meta_jobs.report(self.opts, job_id, snap)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.opts.target_tier == "log":
            abort_staged(self.opts, list(messages))
            return
        table = self._table()
        table.new_commit(self.commit_user).abort(commit_messages(list(messages)))


def _committed(table: Table, commit_user: str, identifier: int) -> Any:
    """The snapshot `commit_user` committed as `identifier` (None when expired)."""
    return next(
        (
            snap
            for snap in table.snapshot_manager.iter_backwards()
            if snap.commit_user == commit_user and snap.commit_identifier == identifier
        ),
        None,
    )


def _fresh_barrier(table: Table) -> int:
    """A new barrier id for input that did not come from a `dts` source: epoch ms, increasing."""
    latest = table.latest_snapshot()
    return next_barrier_id((latest.barrier or 0) if latest is not None else 0)


__all__ = ["DtsBatchWriter", "DtsStreamWriter", "batch_writer"]
