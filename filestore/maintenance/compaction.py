"""Universal compaction of a bucket's sorted runs (as in RocksDB and Paimon).

A bucket's sorted runs (``filestore.state.levels``) are ordered newest first, up to
``max_level`` (= compaction trigger), which holds the oldest data. The picker (Paimon's ``UniversalCompaction``) chooses, once a
bucket has at least ``num-sorted-run.compaction-trigger`` runs:

1. every run, when the newer runs together are larger than
   ``compaction.max-size-amplification-percent`` of the oldest run;
2. else the newest runs while each next run is not much larger than what was
   picked so far (``compaction.size-ratio``);
3. else enough of the newest runs to get back below the trigger.

With deletion vectors, when the picker chooses nothing, the files of an upper level
whose vectors delete ``compaction.delete-ratio-threshold`` of their rows are rewritten
alone, at their level, without those rows (Paimon's option; Iceberg's
``delete-ratio-threshold``): the vectors grow with every upsert of old keys, and every
reader pays for the rows it must skip, an Iceberg reader most (position deletes). Level
0 is left to the picker, which merges it up anyway.

The picked files are merged by the table's merge engine (``merge.merge``) and
written to one output level, rolled at ``target-file-size``. Retractions are
dropped only when every run of the bucket takes part (nothing older remains
that they could still hide). The result is one COMPACT commit that deletes the
inputs and adds the outputs atomically, through the pure snapshot commit
(``filestore.commit.snapshot_commit``): it refuses the commit when an input was already
replaced by a concurrent compaction, and ``_GuardedCompact`` also refuses it
when a concurrent commit added older rows the dropped retractions were needed
for. Housekeeping after a compaction (expiration) is ``filestore.maintenance.table_commit``'s.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa

from filestore.commit.messages import CommitMessage
from filestore.commit.snapshot_commit import CompactFiles, SnapshotCommit
from filestore.errors import CommitConflict
from filestore.format.data_file import DataFileMeta, FileSource
from filestore.format.manifest import ManifestEntry
from filestore.format.schema import KEY_PREFIX, TableSchema
from filestore.format.snapshot import Snapshot
from filestore.read.lookup import lookup_changelog
from filestore.read.merge import merge
from filestore.state.bucket_file import align, key_value_schema, read_bucket_file, write_bucket_file
from filestore.state.context import Partition, TableContext
from filestore.state.deletion_vectors import deleted_count, read_live
from filestore.state.levels import BucketKey, SortedRun, live_by_bucket, run_count, sorted_runs

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]


# -- the picker ------------------------------------------------------------------
@dataclass(frozen=True)
class CompactUnit:
    """What one bucket's compaction rewrites and where to."""

    output_level: int
    files: tuple[DataFileMeta, ...]
    drop_deletes: bool


@dataclass(frozen=True)
class UniversalPicker:
    """Paimon's universal compaction strategy (see the module doc)."""

    max_level: int
    max_size_amp_percent: int
    size_ratio: int
    trigger: int

    def pick(self, runs: Sequence[SortedRun]) -> CompactUnit | None:
        if len(runs) < self.trigger or len(runs) < 2:
            return None
        newer = sum(r.size for r in runs[:-1])
        if newer * 100 > self.max_size_amp_percent * runs[-1].size:
            return self._unit(runs, len(runs))
        unit = self._by_size_ratio(runs, 1, force=False)
        if unit is not None:
            return unit
        # at the trigger: merge enough of the newest runs to end below it
        return self._by_size_ratio(runs, len(runs) - self.trigger + 2, force=True)

    def full(self, runs: Sequence[SortedRun]) -> CompactUnit | None:
        """Everything into the last level; None when that is already the state."""
        if not runs:
            return None
        only = runs[0]
        settled = all(f.delete_row_count == 0 and not f.deletion_vector for f in only.files)
        if len(runs) == 1 and only.level == self.max_level and settled:
            return None
        return self._unit(runs, len(runs))

    def level0(self, runs: Sequence[SortedRun]) -> CompactUnit | None:
        """Every level-0 run, up into the levels (Paimon's ForceUpLevel0Compaction)."""
        count = sum(1 for r in runs if r.level == 0)
        return self._by_size_ratio(runs, count, force=True) if count else None

    def _by_size_ratio(
        self, runs: Sequence[SortedRun], count: int, *, force: bool
    ) -> CompactUnit | None:
        size = sum(r.size for r in runs[:count])
        for nxt in runs[count:]:
            if size * (100 + self.size_ratio) / 100 < nxt.size:
                break
            size += nxt.size
            count += 1
        if force or count > 1:
            return self._unit(runs, count)
        return None

    def _unit(self, runs: Sequence[SortedRun], count: int) -> CompactUnit:
        if count < len(runs):
            level = max(0, runs[count].level - 1)
            if level == 0:  # never write level 0: extend to the next run above it
                for nxt in runs[count:]:
                    count += 1
                    if nxt.level != 0:
                        level = nxt.level
                        break
        if count >= len(runs):
            count, level = len(runs), self.max_level
        files = tuple(f for r in runs[:count] for f in r.files)
        return CompactUnit(level, files, drop_deletes=count == len(runs))


def picker_for(ctx: TableContext) -> UniversalPicker:
    opts = ctx.options
    return UniversalPicker(
        max_level=opts.num_sorted_run_compaction_trigger,
        max_size_amp_percent=opts.compaction_max_size_amplification_percent,
        size_ratio=opts.compaction_size_ratio,
        trigger=opts.num_sorted_run_compaction_trigger,
    )


def _sequence_disjoint(files: Sequence[DataFileMeta]) -> bool:
    return all(a.max_sequence_number < b.min_sequence_number for a, b in itertools.pairwise(files))


def rewrite(
    ctx: TableContext,
    partition: Partition,
    bucket: int,
    unit: CompactUnit,
) -> list[DataFileMeta]:
    """Merge the unit's files and write them to its output level, rolled at target-file-size."""
    schema = ctx.schema
    files = sorted(unit.files, key=lambda f: f.min_sequence_number)  # oldest first
    if schema.primary_key:
        target = key_value_schema(schema)
        tables = [align(read_live(ctx, partition, bucket, f), target) for f in files]
        keys = [KEY_PREFIX + k for k in schema.primary_key]
        merged = merge(
            pa.concat_tables(tables),
            keys,
            schema.core_options,
            drop_deletes=unit.drop_deletes,
            in_sequence_order=_sequence_disjoint(files),
        )
    else:
        target = schema.arrow_schema
        tables = [align(read_bucket_file(ctx, partition, bucket, f), target) for f in files]
        merged = pa.concat_tables(tables)
    total_rows = sum(f.row_count for f in files) or 1
    bytes_per_row = max(1.0, sum(f.file_size for f in files) / total_rows)
    per_file = max(1, int(schema.core_options.target_file_size / bytes_per_row))
    out = []
    # append files carry no sequence column: outputs keep the inputs' range
    low = min(f.min_sequence_number for f in files)
    high = max(f.max_sequence_number for f in files)
    for start in range(0, merged.num_rows, per_file):
        chunk = merged.slice(start, per_file)
        meta = write_bucket_file(
            ctx,
            schema,
            partition,
            bucket,
            chunk,
            level=unit.output_level,
            file_source=FileSource.COMPACT,
        )
        if not schema.primary_key:
            meta = _with_sequence(meta, low, high)
        out.append(meta)
    return out


def _with_sequence(meta: DataFileMeta, low: int, high: int) -> DataFileMeta:
    return replace(meta, min_sequence_number=low, max_sequence_number=high)


# -- planning and committing ---------------------------------------------------
@dataclass
class CompactResult:
    """What one compaction did."""

    snapshot: Snapshot | None = None
    buckets: int = 0
    files_before: int = 0
    files_after: int = 0
    rows_before: int = 0
    rows_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)


def _append_unit(
    schema: TableSchema, files: Sequence[DataFileMeta], full: bool
) -> CompactUnit | None:
    """Append-only buckets: concatenate small files once there are enough of them."""
    opts = schema.core_options
    small = [f for f in files if f.file_size < opts.target_file_size]
    if len(small) < (2 if full else opts.num_sorted_run_compaction_trigger):
        return None
    return CompactUnit(0, tuple(small), drop_deletes=False)


def _lookup(schema: TableSchema) -> bool:
    return bool(schema.primary_key) and schema.core_options.changelog_producer == "lookup"


def _purge_unit(ctx: TableContext, runs: Sequence[SortedRun]) -> CompactUnit | None:
    """The files of one upper level, oldest first, whose deletion vectors hold
    ``compaction.delete-ratio-threshold`` of their rows: rewritten alone at their level
    (the same keys and sequence numbers, less the deleted rows)."""
    share = ctx.options.compaction_delete_ratio
    for run in reversed(runs):
        if run.level == 0:
            continue
        doomed = tuple(
            f for f in run.files if f.deletion_vector and deleted_count(f) >= share * f.row_count
        )
        if doomed:
            return CompactUnit(run.level, doomed, drop_deletes=False)
    return None


def plan_unit(ctx: TableContext, files: Sequence[DataFileMeta], full: bool) -> CompactUnit | None:
    schema = ctx.schema
    if not schema.primary_key:
        return _append_unit(schema, files, full)
    runs = sorted_runs(files)
    picker = picker_for(ctx)
    if full:
        return picker.full(runs)
    unit = picker.pick(runs)
    if unit is None and _lookup(schema):
        # changelog-producer=lookup: level-0 rows reach the changelog only when compacted
        unit = picker.level0(runs)
    return unit or _purge_unit(ctx, runs)


class _GuardedCompact(CompactFiles):
    """A COMPACT commit that also guards the retractions its rewrite dropped.

    For each bucket compacted with ``drop_deletes``: a live file that is not an
    input and holds sequence numbers at or below the inputs' greatest one would
    have needed those retractions, so the compaction must be redone.
    """

    def __init__(self, guards: dict[BucketKey, tuple[set[str], int]]) -> None:
        self.guards = guards

    def check_conflicts(
        self,
        ctx: TableContext,
        messages: Sequence[CommitMessage],
        live: Sequence[ManifestEntry] | None,
    ) -> None:
        super().check_conflicts(ctx, messages, live)
        for e in live or []:
            guard = self.guards.get((e.partition, e.bucket))
            if guard is None:
                continue
            inputs, max_seq = guard
            if e.file.file_name not in inputs and e.file.min_sequence_number <= max_seq:
                raise CommitConflict(
                    f"table {ctx.name}: partition {list(e.partition)} bucket {e.bucket} "
                    f"got older rows ({e.file.file_name}) while it was compacted; "
                    "redo the compaction"
                )


class Compactor:
    """Compacts the buckets of one table and commits the result as one COMPACT snapshot
    (through the pure snapshot commit: no housekeeping after it, see filestore.maintenance.table_commit)."""

    def __init__(self, ctx: TableContext, commit_user: str = "compactor") -> None:
        self.ctx = ctx
        self.commit_user = commit_user

    def compact(
        self,
        *,
        full: bool = False,
        partition: dict[str, str | None] | None = None,
        buckets: Iterable[BucketKey] | None = None,
        progress: Progress | None = None,
    ) -> CompactResult:
        started = time.monotonic()
        result = CompactResult()
        snapshot = self.ctx.snapshot_manager.latest()
        groups = live_by_bucket(self.ctx, snapshot)
        wanted = set(buckets) if buckets is not None else None
        keys = self.ctx.schema.partition_keys
        plans: list[tuple[BucketKey, int, CompactUnit]] = []
        for key, entries in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
            if wanted is not None and key not in wanted:
                continue
            if partition and not _matches(keys, key[0], partition):
                continue
            unit = plan_unit(self.ctx, [e.file for e in entries], full)
            if unit is not None:
                plans.append((key, entries[0].total_buckets, unit))
        messages: list[CommitMessage] = []
        guards: dict[BucketKey, tuple[set[str], int]] = {}
        committer = SnapshotCommit(self.ctx, self.commit_user)
        try:
            for i, ((part, bucket), total, unit) in enumerate(plans):
                new_files = rewrite(self.ctx, part, bucket, unit)
                changelog = self._changelog(part, bucket, unit, groups[(part, bucket)])
                messages.append(
                    CommitMessage(
                        part, bucket, total, tuple(new_files), tuple(unit.files), changelog
                    )
                )
                if unit.drop_deletes:
                    top = max(f.max_sequence_number for f in unit.files)
                    guards[(part, bucket)] = ({f.file_name for f in unit.files}, top)
                _count(result, unit.files, new_files)
                if progress is not None:
                    progress(i + 1, len(plans))
            if messages:
                result.snapshot = committer.publish(
                    _GuardedCompact(guards),
                    messages,
                    int(time.time() * 1000),
                    check_identifier=False,
                ).snapshot
        except BaseException:
            committer.abort(messages)
            raise
        result.buckets = len(plans)
        result.seconds = time.monotonic() - started
        return result

    def _changelog(
        self,
        partition: Partition,
        bucket: int,
        unit: CompactUnit,
        entries: Sequence[ManifestEntry],
    ) -> tuple[DataFileMeta, ...]:
        """changelog-producer=lookup: the changes of the unit's level-0 files (lookup.py)."""
        level0 = [f for f in unit.files if f.level == 0]
        if not level0 or not _lookup(self.ctx.schema):
            return ()
        upper = [e.file for e in entries if e.file.level > 0]
        meta = lookup_changelog(self.ctx, partition, bucket, level0, upper)
        return () if meta is None else (meta,)


def _count(
    result: CompactResult, before: Sequence[DataFileMeta], after: Sequence[DataFileMeta]
) -> None:
    result.files_before += len(before)
    result.files_after += len(after)
    result.rows_before += sum(f.row_count for f in before)
    result.rows_after += sum(f.row_count for f in after)
    result.bytes_before += sum(f.file_size for f in before)
    result.bytes_after += sum(f.file_size for f in after)


def _matches(keys: Sequence[str], values: Partition, wanted: dict[str, str | None]) -> bool:
    got = dict(zip(keys, values, strict=True))
    return all(got.get(k) == (None if v is None else str(v)) for k, v in wanted.items())


def due_buckets(
    ctx: TableContext, snapshot: Snapshot, buckets: Iterable[BucketKey]
) -> list[BucketKey]:
    """Of the given buckets, those auto-compaction should compact at the snapshot."""
    wanted = set(buckets)
    if not wanted:
        return []
    groups = live_by_bucket(ctx, snapshot)
    schema = ctx.schema
    trigger = schema.core_options.num_sorted_run_compaction_trigger
    lookup = _lookup(schema)

    def is_due(entries: Sequence[ManifestEntry]) -> bool:
        if lookup and any(e.file.level == 0 for e in entries):
            return True  # lookup: compact every commit's level-0 files into the changelog
        files = [e.file for e in entries]
        if run_count(schema, files) >= trigger:
            return True
        return bool(schema.primary_key) and _purge_unit(ctx, sorted_runs(files)) is not None

    return [k for k in wanted if k in groups and is_due(groups[k])]


def compact_after_commit(
    ctx: TableContext, snapshot: Snapshot, buckets: Iterable[BucketKey], commit_user: str
) -> Snapshot | None:
    """Auto-compaction: compact the given buckets that reached the trigger; never raises
    on a lost race (the next commit tries again)."""
    due = due_buckets(ctx, snapshot, buckets)
    if not due:
        return None
    try:
        return Compactor(ctx, f"{commit_user}-compact").compact(buckets=due).snapshot
    except CommitConflict as e:
        log.info("table %s: auto-compaction lost a race and is skipped: %s", ctx.name, e)
        return None


__all__ = [
    "CompactResult",
    "CompactUnit",
    "Compactor",
    "SortedRun",
    "UniversalPicker",
    "compact_after_commit",
    "due_buckets",
    "plan_unit",
    "rewrite",
    "sorted_runs",
]
