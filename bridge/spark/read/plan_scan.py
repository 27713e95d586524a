"""Driver-side planning of FileStore scans: the read context and the input partitions.

Runs during planning (batch `partitions()`, a stream reader's `partitions(start, end)`);
the partitions it returns are read by `bridge.spark.read.scan` in the executors.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from bridge.spark.errors import OptionError
from bridge.spark.options import ReadOptions
from bridge.spark.options.schema import spark_arrow_schema, table_columns
from bridge.spark.read.parts import (
    ChangelogFilesPartition,
    ChangesPartition,
    ChangeStepsPartition,
    ReadContext,
    SplitPartition,
    SplitsPartition,
)
from filestore.format.snapshot import COMPACT
from filestore.read.split import merge_free

if TYPE_CHECKING:
    from filestore import Table
    from filestore.read.scan import Split


def read_context(opts: ReadOptions, schema: StructType, table: Table) -> ReadContext:
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


def needs_merge(table: Table, split: Split) -> bool:
    """Whether `split` must go through the merge-on-read path (see `bridge.spark.native.scan`)."""
    return not merge_free(table.schema, split)


# Spark's own file scans pack files into tasks of up to 128 MiB, counting 4 MiB per file
# opened. A Python data source task costs far more to start (measured ~70 ms: the command
# shipped to a Python worker, the Arrow stream set up), so the merge path's tasks are
# bigger: a 5M-row table of 40 merging buckets read in 20 tasks took 2.8 s, in 4 tasks 1.9 s.
TASK_TARGET_BYTES = 256 * 1024 * 1024
FILE_OPEN_COST_BYTES = 4 * 1024 * 1024


def split_cost(split: Split) -> int:
    return sum(int(f.file_size) + FILE_OPEN_COST_BYTES for f in split.files)


def split_partitions(
    table: Table,
    ctx: ReadContext,
    snapshot_id: int,
    splits: list[Split] | None = None,
    *,
    pack: bool = False,
    tasks: int | None = None,
) -> list[InputPartition]:
    """One partition per bucket split of snapshot `snapshot_id` (all of them unless given).

    `pack`: splits packed into tasks of about `TASK_TARGET_BYTES` instead, as Spark packs
    files (the merge part of `dts.table`, beside Spark's own Parquet scan): a table of
    many small buckets (10 partitions x 4 buckets) would otherwise pay a task and Python
    worker round trip per bucket. With `tasks` (the session's cores) their number is a
    multiple of it, so every core gets a share of equal cost.
    """
    snap = table.snapshot(snapshot_id)
    if splits is None:
        scan = table.new_scan(snapshot_id=snapshot_id, filter=ctx.filter, columns=ctx.columns)
        splits = scan.plan()
    if not pack:
        return [SplitPartition(ctx, split, snap.barrier) for split in splits]
    bins = pack_splits(splits, tasks)
    return [
        SplitPartition(ctx, group[0], snap.barrier)
        if len(group) == 1
        else SplitsPartition([SplitPartition(ctx, s, snap.barrier) for s in group])
        for group in bins
    ]


def pack_splits(splits: list[Split], tasks: int | None = None) -> list[list[Any]]:
    """Splits in groups of about equal cost: enough groups that none exceeds
    `TASK_TARGET_BYTES` (unless one split does), a multiple of `tasks` when given,
    never more groups than splits. Largest first, each to the cheapest group so far."""
    if not splits:
        return []
    costs = [split_cost(s) for s in splits]
    count = max(1, math.ceil(sum(costs) / TASK_TARGET_BYTES))
    if tasks and tasks > 1:
        count = math.ceil(count / tasks) * tasks
    count = min(count, len(splits))
    heap = [(0, i) for i in range(count)]
    groups: list[list[Any]] = [[] for _ in range(count)]
    for cost, split in sorted(zip(costs, splits, strict=True), key=lambda p: -p[0]):
        total, i = heapq.heappop(heap)
        groups[i].append(split)
        heapq.heappush(heap, (total + cost, i))
    return groups


def changelog_partitions(
    table: Table, ctx: ReadContext, start: int, end: int
) -> list[InputPartition] | None:
    """One partition per bucket holding stored changelog files in (start, end], each
    file tagged with its snapshot's barrier; None when the range has no stored changelog.
    Reading them costs what changed, never the table (see `filestore.read.changes`)."""
    files = table.changelog_files(start, end)
    if files is None:
        return None
    buckets: dict[tuple[Any, int], list[tuple[int | None, Any]]] = {}
    for f in files:
        buckets.setdefault((f.entry.partition, f.entry.bucket), []).append((f.barrier, f.entry))
    return [ChangelogFilesPartition(ctx, group) for group in buckets.values()]


def changes_partitions(
    table: Table, ctx: ReadContext, start: int, end: int
) -> list[InputPartition]:
    """The changes in (start, end]: stored changelog files per bucket when the range has
    them (`changelog_partitions`), else the snapshot steps, each tagged with its barrier,
    diffed in one partition.

    One task reads the steps in order (see `ChangeStepsPartition`): a later change of a
    key must reach a sink after the earlier one. Compaction snapshots change no rows and
    are skipped.
    """
    if end <= start:
        return []
    stored = changelog_partitions(table, ctx, start, end)
    if stored is not None:
        return stored
    parts: list[ChangesPartition] = []
    prev = start
    for snap in reversed(list(table.snapshot_manager.iter_backwards(end, down_to=start + 1))):
        if snap.commit_kind != COMPACT:
            parts.append(ChangesPartition(ctx, prev, snap.id, snap.barrier))
        prev = snap.id
    if len(parts) > 1:
        return [ChangeStepsPartition(parts)]
    return list(parts)
