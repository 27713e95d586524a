"""The writer of an atomic CREATE / REPLACE TABLE AS SELECT (FLIP-305); see `bridge.spark.ctas`.

The Spark batch writer drives a `filestore.staging.StagedTable`:
`writer()` (driver, planning) begins it - the name is reserved and the empty
table lives under a staging location; tasks write files into it;
the driver-side `commit` commits the staged table's first snapshot and then
publishes it under its name in one rename; `abort` (any task failed, job
cancelled) removes everything. A failed job therefore leaves no table and no
file; two concurrent CTAS of one name: the second `begin` fails with
`TableAlreadyExists`.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from bridge.spark.options import METADATA_COLUMNS, WriteOptions
from bridge.spark.options.catalog import open_catalog
from bridge.spark.options.schema import spark_arrow_schema
from bridge.spark.write import meta_jobs
from bridge.spark.write._tasks import DtsCommitMessage, commit_messages, write_task
from filestore.commit.properties import CommitProperties
from filestore.staging import StagedTable


def table_exists(warehouse: str, name: str) -> bool:
    try:
        open_catalog(warehouse).get_table(name)
    except Exception:
        return False
    return True


def staged_writer(opts: WriteOptions, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
    """Driver side (planning): begin the staged table and return the writer that fills it."""
    name = opts.common.table
    if opts.if_not_exists and not opts.replace and table_exists(opts.common.warehouse, name):
        return SkipWriter()
    arrow = spark_arrow_schema(schema)
    arrow = pa.schema([f for f in arrow if f.name not in METADATA_COLUMNS])
    # the MetaService first: a refused job never reserves the name
    job_id = meta_jobs.register(opts, meta_jobs.CTAS, meta_jobs.new_job_id(meta_jobs.CTAS))
    try:
        staged = _begin(opts, arrow, overwrite)
    except BaseException as e:
        with contextlib.suppress(Exception):
            meta_jobs.finish(opts, job_id, failed=f"staging failed: {e}")
        raise
    return StagedTableWriter(opts, staged, job_id)


def _begin(opts: WriteOptions, arrow: pa.Schema, overwrite: bool) -> Any:
    name = opts.common.table
    return StagedTable.begin(
        opts.common.warehouse,
        name,
        arrow,
        primary_key=opts.primary_key or None,
        partition_by=opts.partition_by or None,
        options=opts.table_options or None,
        replace=opts.replace or overwrite,
        owner=opts.commit_user or "spark-ctas",
    )


class StagedTableWriter(DataSourceArrowWriter):
    """Writes into a staged table; commit publishes it, abort removes it."""

    def __init__(self, opts: WriteOptions, staged: Any, job_id: str | None = None) -> None:
        self.opts = opts
        self.staged = staged
        self.job_id = job_id
        self.commit_user = opts.commit_user or f"spark-ctas-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DtsCommitMessage:
        meta_jobs.heartbeat(self.opts, self.job_id)
        return write_task(self.staged.table, self.commit_user, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        try:
            table = self.staged.table
            snap = table.new_commit(self.commit_user).commit(
                commit_messages(list(messages)), CommitProperties(1, self.opts.barrier)
            )
            self.staged.commit()
        except BaseException as e:
            with contextlib.suppress(Exception):
                self.staged.abort()
            with contextlib.suppress(Exception):
                meta_jobs.finish(self.opts, self.job_id, failed=f"CTAS commit failed: {e}")
            raise
        meta_jobs.report(self.opts, self.job_id, snap)
        meta_jobs.finish(self.opts, self.job_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        try:
            self.staged.abort()
        finally:
            meta_jobs.finish(self.opts, self.job_id, failed="Spark aborted the CTAS job")


class SkipWriter(DataSourceArrowWriter):
    """CREATE TABLE IF NOT EXISTS ... AS SELECT on an existing table: write nothing."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DtsCommitMessage:
        for _ in iterator:  # Spark computes the input anyway; drop it
            pass
        return DtsCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        return None
