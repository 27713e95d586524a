"""Log-tier reads of an upsert-mode log as a full changelog (`log.normalize`, default on).

A primary-key table's log stores upserts (`log.changelog-mode=upsert`): an update
arrives as `+I` of the new row, with no `-U` of the old one, and a delete may carry
only its key. A stream that copies rows by key needs no more, but a filter or an
aggregation that must retract the old row (the seeds' `orders -> customer_totals`)
would silently count it twice. So, as Flink's ChangelogNormalize does for an upsert
source, each micro-batch's range is normalized (`logstore.normalize.Normalizer`):
`+I` for a new key, `-U` + `+U` for a changed one, the full `-D` of a known one.

The old rows come from the FileStore, not from state kept between batches (Spark's
tasks keep none): the driver names, per partition (= bucket), the newest snapshot whose
log prefix of that partition ends at or before the range (`LogStateRef`); the task reads
that bucket's rows of the range's keys at that snapshot, then replays the log records
between the snapshot's offset and the range (usually none, or one barrier: the worker
commits each barrier before the next is complete), and normalizes the range on top.
So a stream on the log tier is exact as soon as the table's worker commits; without
any committed snapshot the replay starts at offset 0. A truncate record becomes the `-D`
of every row the bucket held (then the state is the whole bucket, read once).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from bridge.spark.errors import OptionError
from bridge.spark.read.parts import LogStateRef
from logstore.normalize import at_truncate
from logstore.spec import OFFSET_COLUMN

if TYPE_CHECKING:
    from filestore.table import Table
    from logstore.normalize import Normalizer
    from logstore.spec import LogSpec


def state_refs(
    table: Table, warehouse: str, starts: dict[int, int], floor: int | None = None
) -> dict[int, LogStateRef]:
    """Per partition, the newest snapshot whose recorded log offset of that partition is at
    or before its start. Snapshots are read newest first, down to `floor` (a snapshot id
    an earlier range already used: starts only grow, so it still qualifies)."""
    found: dict[int, LogStateRef] = {}
    for snap in table.snapshot_manager.iter_backwards(down_to=floor):
        if len(found) == len(starts):
            break
        if snap.log_offsets is not None:
            for p, start in starts.items():
                offset = int(snap.log_offsets.get(p, 0))
                if p not in found and offset <= start:
                    found[p] = LogStateRef(warehouse, table.name, int(snap.id), offset)
    return {p: found.get(p, LogStateRef(warehouse, table.name, None, 0)) for p in starts}


def check_replayable(refs: dict[int, LogStateRef], earliest: dict[int, int], topic: str) -> None:
    """A replay must start where the log still holds records: otherwise the old rows of
    the range's keys are unknown, and guessing them is what normalizing is there to avoid."""
    for p, ref in sorted(refs.items()):
        if ref.offset < earliest.get(p, 0):
            raise OptionError(
                f"{topic}[{p}]: normalizing needs the table's rows before offset "
                f"{earliest[p]} (the log no longer holds them and no snapshot records a "
                "later offset of this partition): read with tier=hybrid (the FileStore "
                "snapshot, then the log), or option log.normalize=false for the upserts as "
                "stored"
            )


def committed_rows(
    ref: LogStateRef, bucket: int, keys: pl.DataFrame | None, spec: LogSpec
) -> pa.Table:
    """The bucket's rows of `keys` at the snapshot `ref` names (none without one): point
    lookups in the files this worker process already decoded (`open_table_for_lookups`),
    so a stream's micro-batches read each file of the table once, not a scan per batch.
    With `keys` None, every row of the bucket (a scan: a truncate removes them all)."""
    from bridge.spark.options.catalog import open_table_for_lookups

    if ref.snapshot_id is None or (keys is not None and keys.is_empty()):
        return spec.schema.empty_table()
    table = open_table_for_lookups(ref.warehouse, ref.table)
    if keys is None:
        found = table.read_bucket(bucket, ref.snapshot_id, spec.schema.names)
    else:
        found = table.rows_of_keys(keys.to_arrow(), bucket, ref.snapshot_id)
    return pa.Table.from_arrays(
        [found.column(f.name).cast(f.type) for f in spec.schema], schema=spec.schema
    )


def normalized(
    rows: pa.Table,
    replay: pa.Table,
    ref: LogStateRef,
    bucket: int,
    spec: LogSpec,
    *,
    truncates: Sequence[int] = (),
    replay_truncated_at: int | None = None,
) -> pa.Table:
    """`rows` (one partition's range, in offset order, as decoded) as a full changelog:
    state = the committed rows of their keys, then the replayed records of those keys.

    A truncate record removes every row of the partition before it. `truncates` (the
    offsets of the range's, ascending) become full `-D` rows of every row then live, at
    the truncate's offset, so the state must hold the whole bucket, not only the range's
    keys. After a truncate in the replay (`replay_truncated_at`, its last) the snapshot's
    rows are gone: the state is the replayed records after it.
    """
    from logstore.normalize import Normalizer

    key = list(spec.primary_key)
    keys: pl.DataFrame | None = None
    if not truncates:
        found = pl.from_arrow(rows.select(key))
        assert isinstance(found, pl.DataFrame)
        keys = found.unique()
    if replay_truncated_at is not None:
        replay = replay.filter(pc.greater(replay.column(OFFSET_COLUMN), replay_truncated_at))
    # one shard: the state is gone with the task and never spills, so splitting it by
    # shard (the default 32, for a long-lived state) would only cost a split per step
    normalizer = Normalizer(spec, shards=1)
    try:
        if replay_truncated_at is None:
            normalizer.seed(committed_rows(ref, bucket, keys, spec))
        if replay.num_rows:
            before = pl.from_arrow(replay)
            assert isinstance(before, pl.DataFrame)
            mine = before if keys is None else before.join(keys, on=key, how="semi")
            if len(mine):
                normalizer.process(mine.to_arrow())  # only its state matters
        return _through_truncates(normalizer, rows, truncates, bucket)
    finally:
        normalizer.close()


def _through_truncates(
    normalizer: Normalizer, rows: pa.Table, truncates: Sequence[int], bucket: int
) -> pa.Table:
    """The range normalized, with each truncate's `-D` rows between the rows around it."""
    if not truncates:
        return normalizer.process(rows)
    cuts = np.searchsorted(rows.column(OFFSET_COLUMN).to_numpy(), np.asarray(truncates))
    parts, lo = [], 0
    for offset, cut in zip(truncates, cuts.tolist(), strict=True):
        parts.append(normalizer.process(rows.slice(lo, cut - lo)))
        parts.append(at_truncate(normalizer.retract_all(), bucket, offset))
        lo = cut
    parts.append(normalizer.process(rows.slice(lo)))
    return pa.concat_tables([p.select(rows.schema.names).cast(rows.schema) for p in parts])
