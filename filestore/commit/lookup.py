"""changelog-producer=auto: the exact changelog an APPEND commit stores with itself.

A writer whose input is already a full changelog (``TableWrite(input_changelog=True)``)
stores it as written (``filestore.write._file_writer``). Every other APPEND commit (the
worker's barrier commits, Spark and Python batch writes, which only upsert) gets its changelog here, inside the
commit attempt, against the snapshot it commits on: the old value of every key
its new files touch is looked up in the bucket's live files (``filestore.read.lookup``).
Losing the race for the snapshot rebuilds the attempt, lookup included, so the
stored changes are exact under concurrent writers too.

A bucket whose new rows are all new keys stores no copy: its changelog manifest
entries name the new data files themselves, read as +I rows. The same holds for
every new file of a table without a primary key (appends are their own changelog).

With deletion vectors (``deletion-vectors.enabled``) the same lookup also marks the rows
the new files supersede, in the bucket's live files and among the new files themselves
(``lookup.lookup_vectors``): the live files are re-added with their grown vectors
(``Rebased.revectored``). That runs for every APPEND and OVERWRITE with new files,
whatever the changelog producer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from filestore.commit._rebase import Rebased
from filestore.commit.messages import CommitMessage
from filestore.format.data_file import DataFileMeta, FileSource
from filestore.format.manifest import ManifestEntry
from filestore.format.snapshot import CommitKind
from filestore.read.lookup import lookup_changes, lookup_vectors, write_changes
from filestore.state.bucket_file import is_data_file_changelog
from filestore.state.context import TableContext
from filestore.state.levels import BucketKey
from filestore.threads import parallel_map


def needs_lookup(ctx: TableContext, kind: CommitKind, messages: Sequence[CommitMessage]) -> bool:
    """Whether this commit gets its changelog (or deletion vectors) here (then it needs
    the live files)."""
    if ctx.options.deletion_vectors:
        vectored = (CommitKind.APPEND, CommitKind.OVERWRITE)
        return kind in vectored and any(m.new_files for m in messages)
    return stores_changelog(ctx, kind) and any(
        m.new_files and not m.changelog_files for m in messages
    )


def stores_changelog(ctx: TableContext, kind: CommitKind) -> bool:
    """Whether this commit's lookup stores its changelog (even an empty one: "no change")."""
    return ctx.options.changelog_producer == "auto" and kind == CommitKind.APPEND


def with_changelog(
    ctx: TableContext,
    rebased: Rebased,
    live: Sequence[ManifestEntry],
    kind: CommitKind = CommitKind.APPEND,
) -> Rebased:
    """``rebased`` with a changelog for every message that has new files and none (and,
    with deletion vectors, the vectors its new files make)."""
    if ctx.options.deletion_vectors:
        # an OVERWRITE's new files replace the live ones: only they can supersede each other
        return _with_vectors(ctx, rebased, live if kind == CommitKind.APPEND else [], kind)
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

    done = dict(zip((id(m) for m in todo), parallel_map(one, todo), strict=True))
    return Rebased(
        [done.get(id(m), m) for m in rebased.messages],
        [*rebased.written, *_written(done.values())],
        rebased.replaced,
    )


def _written(messages: Iterable[CommitMessage]) -> list[tuple[BucketKey, str]]:
    """The changelog files the lookup wrote (a data file listed as its own changelog is
    the writer's): a lost race deletes them."""
    return [
        ((m.partition, m.bucket), f.file_name)
        for m in messages
        for f in m.changelog_files
        if not is_data_file_changelog(f.file_name)
    ]


def _with_vectors(
    ctx: TableContext, rebased: Rebased, live: Sequence[ManifestEntry], kind: CommitKind
) -> Rebased:
    """``rebased`` with deletion vectors: the new files', the live files' that grew
    (re-added), and the changelog of every bucket whose writer stored none."""
    groups: dict[BucketKey, list[CommitMessage]] = {}
    for m in rebased.messages:
        if m.new_files:  # several writers may commit files of one bucket together
            groups.setdefault((m.partition, m.bucket), []).append(m)
    entries: dict[BucketKey, list[ManifestEntry]] = {}
    for e in live:
        entries.setdefault((e.partition, e.bucket), []).append(e)
    changelog = stores_changelog(ctx, kind)

    def one(key: BucketKey) -> tuple[list[CommitMessage], list[tuple[ManifestEntry, DataFileMeta]]]:
        messages = groups[key]
        new = [f for m in messages for f in m.new_files]
        old = entries.get(key, [])
        wants = changelog and not any(m.changelog_files for m in messages)
        found = lookup_vectors(ctx, *key, new, [e.file for e in old], need_changes=wants)
        by_name = {f.file_name: f for f in found.new_files}
        done = [
            replace(m, new_files=tuple(by_name[f.file_name] for f in m.new_files)) for m in messages
        ]
        if wants and found.only_inserts:
            done = [replace(m, changelog_files=m.new_files) for m in done]
        elif wants and found.changes is not None and found.changes.num_rows:
            seq = min(f.min_sequence_number for f in new)
            meta = write_changes(ctx, *key, found.changes, seq, FileSource.APPEND)
            done[0] = replace(done[0], changelog_files=(meta,))
        old_by_name = {e.file.file_name: e for e in old}
        return done, [(old_by_name[f.file_name], f) for f in found.grown]

    keys = list(groups)
    results = dict(zip(keys, parallel_map(one, keys), strict=True))
    replaced = {
        id(old): new for key in keys for old, new in zip(groups[key], results[key][0], strict=True)
    }
    messages = [replaced.get(id(m), m) for m in rebased.messages]
    revectored = [pair for key in keys for pair in results[key][1]]
    return Rebased(
        messages,
        [*rebased.written, *_written(m for key in keys for m in results[key][0])],
        rebased.replaced,
        [*rebased.revectored, *revectored],
    )
