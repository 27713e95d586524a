"""Snapshot expiration and orphan-file cleanup.

Which snapshots expire: all but the newest ``snapshot.num-retained.min`` may
go once older than ``snapshot.time-retained``; beyond
``snapshot.num-retained.max`` they go regardless of age. Only a prefix of the
history expires (the earliest snapshots), so the retained ones stay contiguous
and the new earliest one, E, is always kept. Nothing a consumer has still to read
expires (``filestore.state.consumers``: a stream's recorded next snapshot, within
``consumer.expiration-time``), the maximum included, as in Paimon: a stream that falls
behind is the reason to keep its snapshots.

Which files go with them. Data files are never re-added once deleted (a DELETE
and ADD of the same file in one delta manifest only replaces its deletion vector:
the file stays), and a manifest, once dropped from the chain of base manifests,
never comes back; so the snapshots referencing a file form one contiguous range.
Hence:

- a data file deleted by a snapshot in (old earliest, E] is referenced by no
  retained snapshot: it goes unless a tag references it;
- a manifest referenced by an expired snapshot but not by E goes unless a tag
  references it; manifest lists belong to one snapshot each;
- changelog files of expired snapshots go (unless a tagged snapshot owns them).

Orphans (files no snapshot or tag references, e.g. left by a crashed writer)
are removed only when older than a safety window, so files of commits in
flight are never touched.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from filestore.errors import InvalidOption, SnapshotNotFound
from filestore.format.manifest import ADD, DELETE, ManifestEntry
from filestore.format.snapshot import Snapshot
from filestore.iceberg import sync_iceberg
from filestore.state.bucket_file import is_data_file_changelog
from filestore.state.consumers import drop_lapsed_consumers, holding_floor
from filestore.state.context import TableContext
from filestore.state.refs import (
    delete_entry_files,
    referenced_files,
    snapshot_manifests,
    snapshot_refs,
    tag_refs,
)
from filestore.state.tags import tag_snapshot

log = logging.getLogger(__name__)

DAY_MS = 86_400_000


@dataclass
class ExpireResult:
    """What an expiration removed."""

    expired_snapshots: list[int] = field(default_factory=list)
    deleted_data_files: int = 0
    deleted_changelog_files: int = 0
    deleted_manifests: int = 0
    earliest: int | None = None


@dataclass(frozen=True)
class Retention:
    """How many snapshots to keep and for how long."""

    min_retained: int
    max_retained: int
    time_retained_ms: int

    @classmethod
    def of(cls, ctx: TableContext) -> Retention:
        o = ctx.options
        return cls(
            o.snapshot_num_retained_min, o.snapshot_num_retained_max, o.snapshot_time_retained_ms
        )


def expire_range_end(
    ctx: TableContext, retention: Retention, now_ms: int | None = None
) -> int | None:
    """The new earliest snapshot id under the retention (None: nothing to expire)."""
    manager = ctx.snapshot_manager
    latest, earliest = manager.latest_id(), manager.earliest_id()
    if latest is None or earliest is None:
        return None
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    must_below = latest - retention.max_retained + 1  # ids below this expire regardless of age
    may_below = latest - retention.min_retained + 1  # ids below this expire once old enough
    threshold = now_ms - retention.time_retained_ms
    end = earliest
    for sid in range(earliest, min(latest, max(must_below, may_below))):
        if sid >= must_below:
            if sid >= may_below:
                break
            try:
                if manager.get(sid).time_millis >= threshold:
                    break
            except SnapshotNotFound:  # expired concurrently
                pass
        end = sid + 1
    if end > earliest:  # what would expire: the consumers are read only then
        floor = holding_floor(ctx, now_ms)
        end = end if floor is None else min(end, floor)
    return end if end > earliest else None


def expire_snapshots(
    ctx: TableContext,
    *,
    retain_min: int | None = None,
    retain_max: int | None = None,
    older_than_ms: int | None = None,
    now_ms: int | None = None,
) -> ExpireResult:
    """Expire snapshots; arguments override the table's retention options."""
    base = Retention.of(ctx)
    retention = Retention(
        base.min_retained if retain_min is None else retain_min,
        base.max_retained if retain_max is None else retain_max,
        base.time_retained_ms if older_than_ms is None else older_than_ms,
    )
    if retention.min_retained < 1 or retention.max_retained < retention.min_retained:
        raise InvalidOption(
            f"retain at least 1 snapshot and max ({retention.max_retained}) >= "
            f"min ({retention.min_retained})"
        )
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    drop_lapsed_consumers(ctx, now_ms)
    end = expire_range_end(ctx, retention, now_ms)
    if end is None:
        return ExpireResult(earliest=ctx.snapshot_manager.earliest_id())
    return expire_until(ctx, end)


def expire_until(ctx: TableContext, new_earliest: int) -> ExpireResult:
    """Delete snapshots with id < new_earliest and the files only they referenced."""
    manager = ctx.snapshot_manager
    store = ctx.manifest_store
    result = ExpireResult()
    earliest = manager.earliest_id()
    latest = manager.latest_id()
    if earliest is None or latest is None or new_earliest <= earliest:
        result.earliest = earliest
        return result
    new_earliest = min(new_earliest, latest)
    keep = manager.get(new_earliest)
    tags = tag_refs(ctx)
    expired: list[Snapshot] = []
    for sid in range(earliest, new_earliest):
        try:
            expired.append(manager.get(sid))
        except SnapshotNotFound:  # expired concurrently
            continue
    # data files deleted by snapshots (earliest, new_earliest]
    doomed: list[ManifestEntry] = []
    for sid in range(earliest + 1, new_earliest + 1):
        snap = keep if sid == new_earliest else next((s for s in expired if s.id == sid), None)
        if snap is None:
            continue
        delta = store.read_entries([snap.delta_manifest_list])
        # a file re-added in the same delta only had its deletion vector grown: it lives on
        readded = {e.identifier for e in delta if e.kind == ADD}
        for e in delta:
            if (
                e.kind == DELETE
                and e.identifier not in readded
                and e.file.file_name not in tags.data
            ):
                doomed.append(e)
    changelog: list[ManifestEntry] = []
    for snap in expired:
        if snap.changelog_manifest_list:
            for e in store.read_entries([snap.changelog_manifest_list]):
                # a data file stored as its own changelog (commit_lookup) lives and goes
                # with the data files, not with the snapshot that listed it
                own = is_data_file_changelog(e.file.file_name)
                if e.kind == ADD and not own and e.file.file_name not in tags.data:
                    changelog.append(e)
    kept_manifests = snapshot_manifests(ctx, keep) | tags.manifests
    manifests: set[str] = set()
    for snap in expired:
        manifests |= snapshot_manifests(ctx, snap)
    manifests -= kept_manifests
    if expired:  # Iceberg readers stop naming the expired snapshots before their files go
        sync_iceberg(ctx, earliest=new_earliest)
    # EARLIEST before any file goes: a reader never starts from a snapshot being deleted,
    # and an orphan walk that meets one whose manifests are gone knows it is expiring
    ctx.io.write_bytes(ctx.paths.earliest_hint, str(new_earliest).encode())
    delete_entry_files(ctx, doomed)
    delete_entry_files(ctx, changelog)
    for name in manifests:
        ctx.io.delete_file(ctx.paths.manifest(name))
    for snap in expired:
        ctx.io.delete_file(ctx.paths.snapshot(snap.id))
    result.expired_snapshots = [s.id for s in expired]
    result.deleted_data_files = len(doomed)
    result.deleted_changelog_files = len(changelog)
    result.deleted_manifests = len(manifests)
    result.earliest = new_earliest
    if expired:
        log.info(
            "table %s: expired snapshots %d..%d (%d data files, %d manifests deleted)",
            ctx.name,
            expired[0].id,
            expired[-1].id,
            len(doomed),
            len(manifests),
        )
    return result


def expire_after_commit(ctx: TableContext) -> ExpireResult | None:
    """Cheap check after each commit; expires only when the retention options say so."""
    now_ms = int(time.time() * 1000)
    end = expire_range_end(ctx, Retention.of(ctx), now_ms)
    if end is None:
        return None
    drop_lapsed_consumers(ctx, now_ms)  # only when expiring: listing them costs a read
    return expire_until(ctx, end)


# -- tags ----------------------------------------------------------------------
def delete_tag(ctx: TableContext, name: str) -> Snapshot:
    """Remove a tag; files only it kept alive (its snapshot expired) are deleted too."""
    snap = tag_snapshot(ctx, name)
    earliest_id = ctx.snapshot_manager.earliest_id()
    orphaned: set[str] = set()
    manifests: set[str] = set()
    if earliest_id is None or snap.id < earliest_id:
        # the tag was the last thing referencing its snapshot's files
        mine = snapshot_refs(ctx, snap)
        others = tag_refs(ctx, exclude=name)
        kept_data: set[str] = set(others.data)
        kept_manifests: set[str] = set(others.manifests)
        if earliest_id is not None:
            earliest = snapshot_refs(ctx, ctx.snapshot_manager.get(earliest_id))
            kept_data |= earliest.data
            kept_manifests |= earliest.manifests
        orphaned = set(mine.data) - kept_data
        manifests = set(mine.manifests) - kept_manifests
    ctx.io.delete_file(ctx.paths.tag(name))
    if orphaned:
        entries = ctx.manifest_store.read_entries(
            [snap.base_manifest_list, snap.delta_manifest_list, snap.changelog_manifest_list]
        )
        delete_entry_files(ctx, (e for e in entries if e.file.file_name in orphaned))
    for m in manifests:
        ctx.io.delete_file(ctx.paths.manifest(m))
    return snap


# -- orphans -------------------------------------------------------------------
@dataclass
class OrphanResult:
    deleted: list[str] = field(default_factory=list)
    kept_recent: int = 0
    bytes: int = 0


def _candidates(ctx: TableContext) -> Iterable[pafs.FileInfo]:
    selector = pafs.FileSelector(ctx.paths.root, recursive=True, allow_not_found=True)
    for info in ctx.io.fs.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        base = info.base_name
        if base.startswith(("data-", "changelog-", "manifest-")) or base.endswith(".tmp"):
            yield info


def remove_orphans(
    ctx: TableContext,
    older_than_ms: int = DAY_MS,
    *,
    now_ms: int | None = None,
    dry_run: bool = False,
) -> OrphanResult:
    """Delete data/changelog/manifest files no snapshot or tag references, older than the window."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = now_ms - older_than_ms
    # list first, then read references: a file committed meanwhile is then referenced
    candidates = list(_candidates(ctx))
    refs = referenced_files(ctx)
    result = OrphanResult()
    for info in candidates:
        base = info.base_name
        if base in refs.data or base in refs.manifests:
            continue
        mtime_ms = int(info.mtime.timestamp() * 1000) if info.mtime is not None else now_ms
        if mtime_ms > cutoff:
            result.kept_recent += 1
            continue
        result.deleted.append(info.path)
        result.bytes += int(info.size or 0)
        if not dry_run:
            ctx.io.delete_file(info.path)
    return result
