"""Rebase a commit's sequence numbers so that commit order decides which write wins.

Writers number rows when they write them, but a later *commit* must win over
everything committed before it, whatever the write times were. At commit time,
under the race for ``snapshot-N``, the committer compares its new files with the
live files of the same buckets: when a live file whose keys overlap holds a
sequence number at or above one of ours, our files of that bucket are rewritten
with every sequence number shifted past the table's greatest (the order within
the commit is kept). The rewrite is a column replacement, no merge; it happens
only when writers of one bucket actually raced.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc

from filestore.commit.messages import CommitMessage
from filestore.format.data_file import DataFileMeta, FileSource, write_parquet
from filestore.format.manifest import ManifestEntry
from filestore.format.row_kind import SEQUENCE_NUMBER, VALUE_KIND
from filestore.format.schema import KEY_PREFIX
from filestore.format.snapshot import Snapshot
from filestore.state.bucket_file import read_bucket_file
from filestore.state.context import TableContext
from filestore.state.levels import BucketKey


@dataclass
class Rebased:
    """Messages to commit, plus the files the rebase wrote and the ones it replaced."""

    messages: list[CommitMessage]
    written: list[tuple[BucketKey, str]] = field(default_factory=list)
    replaced: list[tuple[BucketKey, str]] = field(default_factory=list)
    # deletion vectors: live files re-added with the vector this commit grew
    revectored: list[tuple[ManifestEntry, DataFileMeta]] = field(default_factory=list)


def rebase(
    ctx: TableContext,
    latest: Snapshot | None,
    messages: list[CommitMessage],
    live: Sequence[ManifestEntry],
) -> Rebased:
    """Shift the sequence numbers of the buckets that lag behind a committed overlap."""
    stale = _stale_buckets(latest, messages, live)
    if not stale or latest is None:
        return Rebased(messages)
    lowest = min(
        f.min_sequence_number
        for m in messages
        if (m.partition, m.bucket) in stale
        for f in (*m.new_files, *m.changelog_files)
    )
    offset = latest.max_sequence_number + 1 - lowest
    out = Rebased([])
    for m in messages:
        key = (m.partition, m.bucket)
        if key not in stale:
            out.messages.append(m)
            continue
        new = tuple(_shift(ctx, key, f, offset, out) for f in m.new_files)
        changelog = tuple(_shift(ctx, key, f, offset, out) for f in m.changelog_files)
        out.messages.append(replace(m, new_files=new, changelog_files=changelog))
    return out


def needs_rebase(latest: Snapshot | None, messages: Sequence[CommitMessage]) -> bool:
    """Whether any new file could lag behind a committed one (else no manifest read)."""
    new = [f for m in messages for f in m.new_files if f.file_source == FileSource.APPEND]
    return (
        bool(new)
        and latest is not None
        and latest.max_sequence_number >= min(f.min_sequence_number for f in new)
    )


def _stale_buckets(
    latest: Snapshot | None, messages: Sequence[CommitMessage], live: Sequence[ManifestEntry]
) -> set[BucketKey]:
    if not needs_rebase(latest, messages):
        return set()
    by_bucket: dict[BucketKey, list[DataFileMeta]] = {}
    for e in live:
        by_bucket.setdefault((e.partition, e.bucket), []).append(e.file)
    stale = set()
    for m in messages:
        key = (m.partition, m.bucket)
        committed = by_bucket.get(key, [])
        if any(
            _lags(f, other)
            for f in m.new_files
            if f.file_source == FileSource.APPEND
            for other in committed
        ):
            stale.add(key)
    return stale


def _lags(f: DataFileMeta, other: DataFileMeta) -> bool:
    """``f`` (ours) has rows numbered at or below a committed row of an overlapping key."""
    if other.file_name == f.file_name or other.max_sequence_number < f.min_sequence_number:
        return False
    return keys_overlap(f, other)


def keys_overlap(a: DataFileMeta, b: DataFileMeta) -> bool:
    a_min, a_max, b_min, b_max = a.min_key(), a.max_key(), b.min_key(), b.max_key()
    if None in (a_min, a_max, b_min, b_max):
        return True
    try:
        return bool(a_min <= b_max and b_min <= a_max)  # type: ignore[operator]
    except TypeError:
        return True


def _shift(
    ctx: TableContext, key: BucketKey, f: DataFileMeta, offset: int, out: Rebased
) -> DataFileMeta:
    """Rewrite one file with its sequence numbers moved by ``offset`` (a new file name)."""
    partition, bucket = key
    data = read_bucket_file(ctx, partition, bucket, f)
    i = data.schema.get_field_index(SEQUENCE_NUMBER)
    shifted = pc.add(data.column(i), pa.scalar(offset, pa.int64()))
    data = data.set_column(i, data.schema.field(i), shifted)
    prefix, _, _ = f.file_name.partition("-")
    name = f"{prefix}-{uuid.uuid4()}-0.parquet"
    schema = ctx.schema
    path = ctx.paths.data_file(schema.partition_keys, partition, bucket, name)
    pk = schema.primary_key
    sorted_columns = [*(KEY_PREFIX + k for k in pk), SEQUENCE_NUMBER, VALUE_KIND, *pk]
    with ctx.io.open_output(path) as sink:
        write_parquet(data, sink, schema.core_options.file_compression, sorted_columns)
        size = sink.tell()
    out.written.append((key, name))
    out.replaced.append((key, f.file_name))
    return replace(
        f,
        file_name=name,
        file_size=size,
        min_sequence_number=f.min_sequence_number + offset,
        max_sequence_number=f.max_sequence_number + offset,
    )
