"""The LSM shape of a bucket: its live files, their levels and sorted runs.

A bucket's files form *sorted runs*: every level-0 file is a run of its own
(flushes overlap in keys), every level above 0 is one run (its files do not
overlap). Runs are ordered newest first: level-0 files by sequence, then
levels 1, 2, ... upwards (the oldest data). Compaction picks runs to merge
(``filestore.maintenance.compaction``); changes() and lookup look at level 0; the write
stall and the exporter count runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from filestore.format.data_file import DataFileMeta
from filestore.format.manifest import ManifestEntry
from filestore.format.schema import TableSchema
from filestore.format.snapshot import Snapshot
from filestore.state.context import Partition, TableContext

BucketKey = tuple[Partition, int]


@dataclass(frozen=True)
class SortedRun:
    """Files of one run: one level-0 file, or all files of a level above 0."""

    level: int
    files: tuple[DataFileMeta, ...]

    @property
    def size(self) -> int:
        return sum(f.file_size for f in self.files)


def sorted_runs(files: Iterable[DataFileMeta]) -> list[SortedRun]:
    """The runs of a bucket, newest first."""
    files = list(files)
    level0 = sorted(
        (f for f in files if f.level == 0), key=lambda f: f.max_sequence_number, reverse=True
    )
    upper: dict[int, list[DataFileMeta]] = {}
    for f in files:
        if f.level > 0:
            upper.setdefault(f.level, []).append(f)
    runs = [SortedRun(0, (f,)) for f in level0]
    runs += [SortedRun(lvl, tuple(upper[lvl])) for lvl in sorted(upper)]
    return runs


def live_by_bucket(
    ctx: TableContext, snapshot: Snapshot | None
) -> dict[BucketKey, list[ManifestEntry]]:
    """The live files of a snapshot, grouped by partition/bucket."""
    out: dict[BucketKey, list[ManifestEntry]] = {}
    for e in ctx.live_entries(snapshot):
        out.setdefault((e.partition, e.bucket), []).append(e)
    return out


def has_level0(ctx: TableContext, snapshot: Snapshot | None) -> bool:
    """Whether any bucket holds level-0 files (rows not compacted yet)."""
    return any(e.file.level == 0 for e in ctx.live_entries(snapshot))


def run_count(schema: TableSchema, files: Sequence[DataFileMeta]) -> int:
    """Sorted runs of a bucket; append-only buckets count their small files."""
    if not schema.primary_key:
        target = schema.core_options.target_file_size
        return sum(1 for f in files if f.file_size < target)
    return len(sorted_runs(files))


def run_counts(ctx: TableContext, snapshot: Snapshot | None) -> dict[BucketKey, int]:
    """Sorted runs per bucket at a snapshot (for monitoring and the write stall)."""
    schema = ctx.schema
    return {
        k: run_count(schema, [e.file for e in es])
        for k, es in live_by_bucket(ctx, snapshot).items()
    }
