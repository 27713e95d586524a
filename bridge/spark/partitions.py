"""Input partitions of the `dts` source and the executor-side code that reads them.

Partitions are small picklable objects built on the driver; `read_partition`
runs in the executors' Python workers and is stateless (it reopens the table
from the warehouse; opening is cheap: it only reads the schema file).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from bridge.spark.arrow_schema import conform
from bridge.spark.catalog import open_table
from bridge.spark.changes import snapshot_changes
from bridge.spark.options import BARRIER, ROW_KIND


@dataclass
class ReadContext:
    """What every partition of one scan shares (pickled with each partition)."""

    warehouse: str
    table: str
    columns: list[str]
    target: pa.Schema  # the Arrow form of the Spark output schema
    filter: pc.Expression | None = None


class SplitPartition(InputPartition):
    """One FileStore bucket split of a snapshot, emitted as +I rows."""

    def __init__(self, ctx: ReadContext, split: Any, barrier: int | None) -> None:
        super().__init__(None)
        self.ctx, self.split, self.barrier = ctx, split, barrier


class ChangesPartition(InputPartition):
    """The changes of one snapshot step (start exclusive, end inclusive)."""

    def __init__(self, ctx: ReadContext, start: int, end: int, barrier: int | None) -> None:
        super().__init__(None)
        self.ctx, self.start, self.end, self.barrier = ctx, start, end, barrier


class ChangeStepsPartition(InputPartition):
    """Consecutive snapshot steps read in order by ONE task.

    A sink gives rows sequence numbers in the order its task writes them; steps spread
    over parallel tasks could be written in any order, so an older change of a key could
    win over a newer one. One task per run of steps keeps the changelog's order.
    """

    def __init__(self, steps: list[ChangesPartition]) -> None:
        super().__init__(None)
        self.steps = steps


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
    elif isinstance(p, ChangesPartition):
        yield from _read_changes(p)
    elif isinstance(p, ChangeStepsPartition):
        for step in p.steps:
            yield from _read_changes(step)
    else:  # pragma: no cover - partitions come from this module only
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
