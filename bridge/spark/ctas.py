"""Atomic CREATE TABLE AS SELECT (FLIP-305) and REPLACE TABLE AS SELECT for Spark.

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

from bridge.spark import meta_jobs
from bridge.spark.arrow_schema import spark_arrow_schema
from bridge.spark.catalog import open_catalog
from bridge.spark.options import METADATA_COLUMNS, WriteOptions
from bridge.spark.sink import DtsCommitMessage, _messages, write_task


def _table_exists(warehouse: str, name: str) -> bool:
    try:
        open_catalog(warehouse).get_table(name)
    except Exception:
        return False
    return True


def staged_writer(opts: WriteOptions, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
    """Driver side (planning): begin the staged table and return the writer that fills it."""
    name = opts.common.table
    if opts.if_not_exists and not opts.replace and _table_exists(opts.common.warehouse, name):
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
    from filestore.staging import StagedTable

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
                _messages(table, list(messages)), identifier=1, barrier=self.opts.barrier
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


def create_table_as(
    spark: Any,
    name: str,
    df: Any,
    *,
    warehouse: str | None = None,
    primary_key: list[str] | None = None,
    partition_by: list[str] | None = None,
    options: dict[str, str] | None = None,
    if_not_exists: bool = False,
    replace: bool = False,
) -> bool:
    """Atomically create table `name` from `df` (or replace it); False when skipped.

    `warehouse` defaults to the Spark conf `spark.dts.warehouse`. `options` are
    table options (e.g. {"bucket": "4"}).
    """
    from bridge.spark.register import BY_NAME_CONF, expose, register, session_defaults

    warehouse = warehouse or spark.conf.get("spark.dts.warehouse", None)
    if not warehouse:
        raise ValueError("create_table_as needs warehouse= or the Spark conf spark.dts.warehouse")
    if "." not in name:
        name = f"default.{name}"
    if if_not_exists and not replace and _table_exists(warehouse, name):
        return False
    register(spark)
    writer = (
        df.write.format("dts")
        .option("warehouse", warehouse)
        .option("create", "true")
        .option("replace", str(replace).lower())
        .option("if-not-exists", str(if_not_exists).lower())
    )
    if primary_key:
        writer = writer.option("primary-key", ",".join(primary_key))
    if partition_by:
        writer = writer.option("partition-by", ",".join(partition_by))
    for k, v in (options or {}).items():
        writer = writer.option(f"table.{k}", str(v))
    writer.mode("overwrite" if replace else "append").save(name)
    if spark.conf.get(BY_NAME_CONF, "false") == "true":
        expose(
            spark,
            open_catalog(warehouse).get_table(name),
            {**session_defaults(spark), "warehouse": warehouse},
        )
    return True
