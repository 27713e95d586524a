"""Executor-side reading of FileStore scan partitions (planned by `bridge.spark.read.plan_scan`).

`read_partition` runs in the executors' Python workers, one call per partition, and
is stateless: it reopens the table from the warehouse (cheap: only the schema file).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from bridge.spark.options import BARRIER, ROW_KIND
from bridge.spark.options.catalog import open_table
from bridge.spark.options.schema import conform
from bridge.spark.read.parts import (
    ChangelogFilesPartition,
    ChangesPartition,
    ChangeStepsPartition,
    ReadContext,
    SplitPartition,
    SplitsPartition,
)
from filestore.read.changes import read_changelog_file

if TYPE_CHECKING:
    from filestore import Table


def _with_metadata(batch: Any, kind: str, barrier: int | None) -> Any:
    """Append constant `_row_kind` (unless present) and `_barrier` columns."""
    n = batch.num_rows
    if ROW_KIND not in batch.schema.names:
        batch = batch.append_column(ROW_KIND, pa.repeat(pa.scalar(kind, pa.string()), n))
    if BARRIER not in batch.schema.names:
        value = pa.scalar(barrier, pa.int64())
        batch = batch.append_column(BARRIER, pa.repeat(value, n))
    return batch


def _needs_metadata(ctx: ReadContext) -> bool:
    return ROW_KIND in ctx.target.names or BARRIER in ctx.target.names


def read_partition(p: InputPartition) -> Iterator[pa.RecordBatch]:
    """Read one partition as Arrow record batches shaped like the Spark schema.

    A plain `InputPartition` is PySpark's stand-in for an empty plan (it substitutes
    `[InputPartition(None)]` when `partitions()` returns nothing): it reads no rows.
    """
    if type(p) is InputPartition:
        return
    if isinstance(p, SplitPartition):
        yield from _read_split(p)
    elif isinstance(p, SplitsPartition):
        for part in p.parts:
            yield from _read_split(part)
    elif isinstance(p, ChangesPartition):
        yield from _read_changes(p)
    elif isinstance(p, ChangeStepsPartition):
        for step in p.steps:
            yield from _read_changes(step)
    elif isinstance(p, ChangelogFilesPartition):
        yield from _read_changelog_files(p)
    else:  # pragma: no cover - partitions come from bridge.spark.read.plan_scan only
        raise TypeError(f"unexpected partition {type(p).__name__}")


def _read_split(p: SplitPartition) -> Iterator[pa.RecordBatch]:
    ctx = p.ctx
    table = open_table(ctx.warehouse, ctx.table)
    meta = _needs_metadata(ctx)
    for batch in table.read_split(p.split, columns=ctx.columns, filter=ctx.filter):
        if batch.num_rows == 0:
            continue
        if meta:
            batch = _with_metadata(batch, "+I", p.barrier)
        yield conform(batch, ctx.target)


def snapshot_changes(
    table: Table, start: int, end: int, columns: list[str] | None = None
) -> pa.Table:
    """Rows changed after snapshot `start` (exclusive, 0 = empty) up to `end` (inclusive).

    `start <= 0` means "from an empty table": the end snapshot's rows, all `+I` (the
    first micro-batch of `scan.mode=latest-full`). Otherwise the FileStore's own
    `Table.changes(start, end)` answers, which is correct across compactions.
    """
    if start <= 0:
        rows = table.read(snapshot_id=end, columns=columns)
        out = rows.append_column(ROW_KIND, pa.repeat(pa.scalar("+I", pa.string()), rows.num_rows))
    else:
        out = table.changes(start, end)
    keep = [*(columns or [n for n in out.schema.names if n != ROW_KIND]), ROW_KIND]
    return out.select([c for c in keep if c in out.schema.names])


def _read_changes(p: ChangesPartition) -> Iterator[pa.RecordBatch]:
    ctx = p.ctx
    table = open_table(ctx.warehouse, ctx.table)
    changes = snapshot_changes(table, p.start, p.end, ctx.columns)
    if ctx.filter is not None and changes.num_rows:
        changes = changes.filter(ctx.filter)
    changes = _with_metadata(changes, "+I", p.barrier)
    for batch in changes.to_batches(max_chunksize=65536):
        if batch.num_rows:
            yield conform(batch, ctx.target)


def _read_changelog_files(p: ChangelogFilesPartition) -> Iterator[pa.RecordBatch]:
    ctx = p.ctx
    table = open_table(ctx.warehouse, ctx.table)
    target = table.schema.arrow_schema
    for barrier, entry in p.files:
        changes = read_changelog_file(table, entry, target)
        changes = changes.select([*ctx.columns, ROW_KIND])
        if ctx.filter is not None and changes.num_rows:
            changes = changes.filter(ctx.filter)
        changes = _with_metadata(changes, "+I", barrier)
        for batch in changes.to_batches(max_chunksize=131072):
            if batch.num_rows:
                yield conform(batch, ctx.target)
