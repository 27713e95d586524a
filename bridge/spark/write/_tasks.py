"""Executor-side writing, shared by every `dts` writer (append, overwrite, CTAS, streaming).

A task writes data files through `Table.new_write(...).prepare()` and hands the
driver a `DtsCommitMessage`; nothing is visible until the driver-side commit turns
every task's messages into ONE snapshot (`commit_messages` reads them back).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import WriterCommitMessage

from bridge.spark.errors import OptionError, SchemaConflict
from bridge.spark.options import BARRIER, ROW_KIND
from filestore import CommitMessage, Table, TableWrite
from filestore.errors import SchemaError
from filestore.format.schema import TableSchema


@dataclass
class DtsCommitMessage(WriterCommitMessage):
    """What one write task hands the driver: its FileStore commit messages as JSON."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    rows: int = 0
    max_barrier: int | None = None


def table_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Spark's batch -> the table's Arrow schema, keeping `_row_kind`, dropping `_barrier`."""
    cols, fields = [], []
    for f in target:
        if f.name not in batch.schema.names:
            raise OptionError(f"column {f.name!r} of the table is missing from the written data")
        col = batch.column(f.name)
        cols.append(col if col.type == f.type else col.cast(f.type))
        fields.append(f)
    if ROW_KIND in batch.schema.names:
        cols.append(batch.column(ROW_KIND).cast(pa.string()))
        fields.append(pa.field(ROW_KIND, pa.string()))
    return pa.RecordBatch.from_arrays(cols, schema=pa.schema(fields))


def in_barrier_order(changes: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """A task's changes in the order a keyed table must apply them: by source barrier,
    and within one barrier in the order they came.

    The table keeps each key's last row written, so that order decides the result. The
    source hands a query each key's changes in order, but the query's plan need not keep
    it across barriers: a join drops the source's sort (Spark removes sorts below a join)
    and a catch-up batch's files of several snapshots are read in any order; an order's
    update applied before its insert left the old row in place. Within one barrier the
    order they came in is the source's (one key's rows come from one bucket or partition,
    read by one task, and a shuffle keeps one map task's order): a log-tier barrier holds
    every change of a key in sequence (an insert, then its delete), so the sort is stable
    and never reorders rows of one barrier. Rows without a barrier (not from a ``dts``
    source) keep the order they came in."""
    if not changes:
        return []
    rows = pa.Table.from_batches(changes)
    barrier = rows.column(BARRIER)
    if barrier.null_count:
        return changes
    # stable: rows of one barrier keep their order
    order = pc.sort_indices(barrier)
    ordered: list[pa.RecordBatch] = rows.take(order).to_batches()
    return ordered


BARRIER_SHIFT = 20
"""A barrier's rows are numbered from ``(barrier - since) << 20``: barrier ids are epoch
milliseconds (a barrier a second later leaves 2^30 numbers), as the writer's own clock
numbers rows from ``now_ms << 20``."""


def barrier_sequence_numbers(ordered: list[pa.RecordBatch], latest: Any) -> np.ndarray | None:
    """Sequence numbers that order a write's rows by source barrier across ALL its tasks.

    Each task sorts its own rows by barrier (`in_barrier_order`), but a key's changes of
    two barriers may reach two tasks (a shuffle not by key, a catch-up batch over several
    snapshots), and the writer's clock would let the task that wrote last win. Every task
    of one write sees the same latest snapshot (this query is the table's writer), so
    numbering from its greatest sequence number, `(barrier - its barrier) << 20 +
    position in the barrier`, makes a later barrier's row win in any task; within a
    barrier, rows keep the order they came in.

    None (the writer's clock) for rows without a barrier, and when the latest snapshot
    has none (a write not from a barrier source came last: no common origin; numbering
    from barrier 0 there would leap by `barrier << 20` each time)."""
    if not ordered or (latest is not None and latest.barrier is None):
        return None
    barriers = pa.Table.from_batches(ordered).column(BARRIER)
    if barriers.null_count:
        return None
    b = barriers.to_numpy().astype(np.int64)  # ascending: in_barrier_order sorted them
    # an empty table: from barrier 0, the scale of the writer's clock (epoch ms << 20)
    base = latest.max_sequence_number + 1 if latest is not None else 0
    since = latest.barrier if latest is not None else 0
    n = np.arange(len(b), dtype=np.int64)
    position = n - np.searchsorted(b, b, side="left")
    seqs = base + (np.maximum(b - since, 0) << BARRIER_SHIFT) + position
    # a barrier of over 2^20 rows in one task must not run into the next one's numbers
    out: np.ndarray = np.maximum.accumulate(seqs - n) + n
    return out


class EvolvingTable:
    """`table` as it will be once schema version `schema` is published: a `mergeSchema`
    write's tasks write their files with the new columns (stamped with the new version)
    while the table itself still has the old one; the driver publishes the version in
    its commit, right before the snapshot (`publish_schema`), so a write that fails or
    is aborted leaves the schema unchanged."""

    def __init__(self, table: Table, schema: TableSchema) -> None:
        self._table = table
        self.schema = schema

    def __getattr__(self, name: str) -> Any:
        return getattr(self._table, name)


def publish_schema(table: Table, schema: TableSchema | None) -> None:
    """Driver side, in the commit: publish the schema version the tasks wrote with.

    Nothing to do when the table has it already (an earlier micro-batch published it);
    a different version in its place means the schema changed while the write ran.
    """
    if schema is None:
        return
    current = table.schema
    if current.id >= schema.id:
        if table.schema_manager.schema(schema.id).arrow_schema.equals(schema.arrow_schema):
            return
    elif current.id == schema.id - 1:
        try:
            published = table.evolve_schema(schema.arrow_schema)
        except SchemaError as e:
            raise SchemaConflict(
                f"{table.name}: mergeSchema cannot publish its columns: {e}"
            ) from e
        if published.id == schema.id:
            return
    raise SchemaConflict(
        f"{table.name}: its schema changed while this mergeSchema write ran (the write "
        f"prepared version {schema.id}, the table is at {table.schema.id}); the write was "
        "not committed: run it again"
    )


def write_task(
    table: Table,
    commit_user: str,
    batches: Iterator[pa.RecordBatch],
    schema: TableSchema | None = None,
) -> DtsCommitMessage:
    """Executor side: write every batch, prepare, return the messages (files not visible).

    `schema`: the not yet published version a `mergeSchema` write writes with (see
    `EvolvingTable`); None writes with the table's schema.
    """
    writer = (
        table.new_write(commit_user)
        if schema is None
        else TableWrite(cast(Table, EvolvingTable(table, schema)), commit_user)  # duck-typed
    )
    target = pa.schema([f for f in writer.schema.arrow_schema if f.name not in (ROW_KIND, BARRIER)])
    rows, max_barrier = 0, None
    changes: list[pa.RecordBatch] = []  # a keyed table's changes, applied in barrier order
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            stamped = BARRIER in batch.schema.names
            if stamped:
                b = pc.max(batch.column(BARRIER)).as_py()
                if b is not None:
                    max_barrier = b if max_barrier is None else max(max_barrier, b)
            if writer.primary_key and stamped:  # only the barrier orders them
                changes.append(batch)
            else:
                writer.write(table_batch(batch, target))
            rows += batch.num_rows
        ordered = in_barrier_order(changes)
        seqs = barrier_sequence_numbers(ordered, table.latest_snapshot())
        at = 0
        for batch in ordered:
            mine = None if seqs is None else seqs[at : at + batch.num_rows]
            writer.write(table_batch(batch, target), sequence_numbers=mine)
            at += batch.num_rows
        messages = writer.prepare()
    except BaseException:
        # leave no orphan files behind a failed task
        with contextlib.suppress(Exception):
            table.new_commit(commit_user).abort(writer.prepare())
        raise
    finally:
        with contextlib.suppress(Exception):
            writer.close()
    return DtsCommitMessage([m.to_json() for m in messages], rows, max_barrier)


def commit_messages(messages: list[WriterCommitMessage | None]) -> list[CommitMessage]:
    """The FileStore commit messages of every task (driver side, in `commit`/`abort`)."""
    out: list[CommitMessage] = []
    for m in messages:
        if isinstance(m, DtsCommitMessage):
            out.extend(CommitMessage.from_json(j) for j in m.messages)
    return out
