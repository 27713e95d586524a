"""Driver-side planning of FileStore scans: the read context and the input partitions.

Runs during planning (batch `partitions()`, a stream reader's `partitions(start, end)`);
the partitions it returns are read by `bridge.spark.read_scan` in the executors.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from bridge.spark.arrow_schema import spark_arrow_schema, table_columns
from bridge.spark.errors import OptionError
from bridge.spark.options import ReadOptions
from bridge.spark.read_parts import (
    ChangesPartition,
    ChangeStepsPartition,
    ReadContext,
    SplitPartition,
    SplitsPartition,
)
from filestore.read import _key_sections
from filestore.snapshot import COMPACT


def read_context(opts: ReadOptions, schema: StructType, table: Any) -> ReadContext:
    """The shared part of every partition of a scan of `table` with Spark schema `schema`."""
    known = set(table.schema.arrow_schema.names)
    columns = table_columns(schema)
    unknown = [c for c in columns if c not in known]
    if unknown:
        raise OptionError(f"columns {unknown} are not in table {table.name}")
    return ReadContext(
        warehouse=opts.common.warehouse,
        table=opts.common.table,
        columns=columns,
        target=spark_arrow_schema(schema),
    )


def needs_merge(table: Any, split: Any) -> bool:
    """Whether `split` must go through the merge-on-read path (see `bridge.spark.native`)."""
    schema_id = table.schema.id
    if any(f.schema_id != schema_id for f in split.files):
        return True  # files of an older schema: the Python reader aligns them
    if not table.primary_key:
        return False
    if any(f.delete_row_count for f in split.files):
        return True
    return any(len(section) > 1 for section in _key_sections(split.files))


# Spark's own file scans pack files into tasks of up to 128 MiB, counting 4 MiB per file
# opened; the Python merge path does more work per byte, so its tasks get half that.
TASK_TARGET_BYTES = 64 * 1024 * 1024
FILE_OPEN_COST_BYTES = 4 * 1024 * 1024


def split_cost(split: Any) -> int:
    return sum(int(f.file_size) + FILE_OPEN_COST_BYTES for f in split.files)


def split_partitions(
    table: Any,
    ctx: ReadContext,
    snapshot_id: int,
    splits: list[Any] | None = None,
    *,
    pack: bool = False,
) -> list[InputPartition]:
    """One partition per bucket split of snapshot `snapshot_id` (all of them unless given).

    `pack`: splits packed into tasks of about `TASK_TARGET_BYTES` instead, as Spark packs
    files (the merge part of `dts.table`, beside Spark's own Parquet scan): a table of
    many small buckets (10 partitions x 4 buckets) would otherwise pay a task and Python
    worker round trip per bucket.
    """
    snap = table.snapshot(snapshot_id)
    if splits is None:
        scan = table.new_scan(snapshot_id=snapshot_id, filter=ctx.filter, columns=ctx.columns)
        splits = scan.plan()
    if not pack:
        return [SplitPartition(ctx, split, snap.barrier) for split in splits]
    out: list[InputPartition] = []
    group: list[SplitPartition] = []
    size = 0
    for split in sorted(splits, key=split_cost, reverse=True):
        cost = split_cost(split)
        if group and size + cost > TASK_TARGET_BYTES:
            out.append(group[0] if len(group) == 1 else SplitsPartition(group))
            group, size = [], 0
        group.append(SplitPartition(ctx, split, snap.barrier))
        size += cost
    if group:
        out.append(group[0] if len(group) == 1 else SplitsPartition(group))
    return out


def changes_partitions(table: Any, ctx: ReadContext, start: int, end: int) -> list[InputPartition]:
    """The snapshot steps in (start, end], each tagged with its barrier, in one partition.

    One task reads the steps in order (see `ChangeStepsPartition`): a later change of a
    key must reach a sink after the earlier one. Compaction snapshots change no rows and
    are skipped.
    """
    if end <= start:
        return []
    parts: list[ChangesPartition] = []
    prev = start
    for snap in table.snapshots():
        if snap.id <= start or snap.id > end:
            continue
        if snap.commit_kind != COMPACT:
            parts.append(ChangesPartition(ctx, prev, snap.id, snap.barrier))
        prev = snap.id
    if len(parts) > 1:
        return [ChangeStepsPartition(parts)]
    return list(parts)
