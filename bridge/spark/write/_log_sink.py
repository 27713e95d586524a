"""Streaming sink into a table's LogStore (`target.tier=log`).

Kafka transactions belong to one producer, so tasks cannot share one. Tasks
therefore stage their rows as Parquet files under
`<warehouse>/_spark_staging/<table>/<commit user>/`; the driver-side commit reads
them and writes the whole micro-batch plus the barrier markers in ONE
transaction (`LogWriter.barrier(source barrier)`), then deletes the staged files.
The Faust worker then flushes that barrier into the FileStore.

Idempotence: the barrier ids on the topic strictly increase, so a replayed
micro-batch whose barrier is already on the topic is skipped. (Input that did
not come from a `dts` source has no barrier to compare; it gets a fresh one.)
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from bridge.spark.errors import OptionError
from bridge.spark.options import BARRIER, ROW_KIND, WriteOptions
from bridge.spark.write._tasks import DtsCommitMessage
from bridge.tables import log_spec_for
from filestore.io.fileio import resolve_filesystem

if TYPE_CHECKING:
    from filestore import Table


def _staging_dir(opts: WriteOptions, commit_user: str) -> tuple[Any, str]:
    fs, root = resolve_filesystem(opts.common.warehouse, None)
    return fs, f"{root}/_spark_staging/{opts.common.table}/{commit_user}"


def stage_task(
    opts: WriteOptions, commit_user: str, batches: Iterator[pa.RecordBatch]
) -> DtsCommitMessage:
    """Executor side: stage this task's rows in one Parquet file."""
    fs, base = _staging_dir(opts, commit_user)
    rows = [
        b.drop_columns([BARRIER]) if BARRIER in b.schema.names else b for b in batches if b.num_rows
    ]
    if not rows:
        return DtsCommitMessage([], 0, None)
    fs.create_dir(base, recursive=True)
    path = f"{base}/{uuid.uuid4().hex}.parquet"
    with fs.open_output_stream(path) as out:
        pq.write_table(pa.Table.from_batches(rows), out)
    return DtsCommitMessage([{"staged": path}], sum(b.num_rows for b in rows), None)


def _paths(messages: list[Any]) -> list[str]:
    return [
        j["staged"]
        for m in messages
        if m is not None
        for j in getattr(m, "messages", [])
        if "staged" in j
    ]


def commit_to_log(
    opts: WriteOptions,
    table: Table,
    commit_user: str,
    messages: list[Any],
    batch_id: int,
    barrier: int | None,
    *,
    truncate: bool = False,
) -> None:
    """Driver side: one transaction with every staged row and the barrier markers;
    ``truncate`` (complete mode) empties the table first, in the same transaction."""
    from bridge.tables import open_log_writer  # LogWriter: driver side only (kafka_access)

    if not opts.common.bootstrap:
        raise OptionError('target.tier=log needs .option("bootstrap", "host:port")')
    spec = log_spec_for(table)
    fs, _ = _staging_dir(opts, commit_user)
    writer = open_log_writer(
        table,
        opts.common.bootstrap,
        transactional_id=f"dts-spark-{commit_user}",
        barrier_interval_s=None,
    )
    try:
        if barrier is not None and barrier <= writer.last_barrier:
            writer.close(final_barrier=False)  # replayed batch: already on the topic
        else:
            if truncate:
                writer.truncate()
            for path in _paths(messages):
                with fs.open_input_file(path) as f:
                    data = pq.read_table(f)
                cols = [c for c in [*spec.schema.names, ROW_KIND] if c in data.schema.names]
                writer.write(data.select(cols))
            writer.barrier(barrier)
            writer.close(final_barrier=False)
    except BaseException:
        with contextlib.suppress(Exception):
            writer.abort()
        raise
    abort_staged(opts, messages)


def abort_staged(opts: WriteOptions, messages: list[Any]) -> None:
    """Delete the staged files of a micro-batch."""
    fs, _ = _staging_dir(opts, "x")
    for path in _paths(messages):
        with contextlib.suppress(FileNotFoundError):
            fs.delete_file(path)
