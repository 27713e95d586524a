"""changelog-producer=auto: the exact changelog an APPEND commit stores with itself.

A writer whose input is already a full changelog (``TableWrite(input_changelog=True)``)
stores it as written (``filestore.file_writer``). Every other APPEND commit (the
worker's barrier commits, Spark and Python batch writes, which only upsert) gets its changelog here, inside the
commit attempt, against the snapshot it commits on: the old value of every key
its new files touch is looked up in the bucket's live files (``filestore.lookup``).
Losing the race for the snapshot rebuilds the attempt, lookup included, so the
stored changes are exact under concurrent writers too.

A bucket whose new rows are all new keys stores no copy: its changelog manifest
entries name the new data files themselves, read as +I rows. The same holds for
every new file of a table without a primary key (appends are their own changelog).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from filestore.context import TableContext
from filestore.data_file import FileSource
from filestore.levels import BucketKey
from filestore.lookup import lookup_changes, write_changes
from filestore.manifest import ManifestEntry
from filestore.messages import CommitMessage
from filestore.rebase import Rebased
from filestore.snapshot import CommitKind


def needs_lookup(ctx: TableContext, kind: CommitKind, messages: Sequence[CommitMessage]) -> bool:
    """Whether this commit gets its changelog here (then it needs the live files)."""
    if ctx.options.changelog_producer != "auto" or kind != CommitKind.APPEND:
        return False
    return any(m.new_files and not m.changelog_files for m in messages)


def with_changelog(ctx: TableContext, rebased: Rebased, live: Sequence[ManifestEntry]) -> Rebased:
    """``rebased`` with a changelog for every message that has new files and none."""
    todo = [m for m in rebased.messages if m.new_files and not m.changelog_files]
    if not ctx.schema.primary_key:
        done = {id(m): replace(m, changelog_files=m.new_files) for m in todo}
        return replace(rebased, messages=[done.get(id(m), m) for m in rebased.messages])
    files: dict[BucketKey, list[ManifestEntry]] = {}
    for e in live:
        files.setdefault((e.partition, e.bucket), []).append(e)

    def one(m: CommitMessage) -> CommitMessage:
        upper = [e.file for e in files.get((m.partition, m.bucket), [])]
        found = lookup_changes(ctx, m.partition, m.bucket, m.new_files, upper, need_rows=False)
        if found.only_inserts:
            return replace(m, changelog_files=m.new_files)
        if found.changes is None or found.changes.num_rows == 0:
            return m
        seq = min(f.min_sequence_number for f in m.new_files)
        meta = write_changes(ctx, m.partition, m.bucket, found.changes, seq, FileSource.APPEND)
        return replace(m, changelog_files=(meta,))

    workers = max(1, min(len(todo), os.cpu_count() or 1))
    with ThreadPoolExecutor(workers, thread_name_prefix="filestore-commit-lookup") as pool:
        done = dict(zip((id(m) for m in todo), pool.map(one, todo), strict=True))
    written = [
        ((m.partition, m.bucket), f.file_name)
        for m in done.values()
        for f in m.changelog_files
        if f.file_name.startswith("changelog-")
    ]
    return Rebased(
        [done.get(id(m), m) for m in rebased.messages],
        [*rebased.written, *written],
        rebased.replaced,
    )
