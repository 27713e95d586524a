"""Snapshot expiration and orphan-file cleanup.

Which snapshots expire: all but the newest ``snapshot.num-retained.min`` may
go once older than ``snapshot.time-retained``; beyond
``snapshot.num-retained.max`` they go regardless of age. Only a prefix of the
history expires (the earliest snapshots), so the retained ones stay contiguous
and the new earliest one, E, is always kept.

Which files go with them. Data files are never re-added once deleted, and a
manifest, once dropped from the chain of base manifests, never comes back; so
the snapshots referencing a file form one contiguous range. Hence:

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
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from filestore.errors import InvalidOption, SnapshotNotFound
from filestore.manifest import ADD, DELETE, ManifestEntry, merge_entries
from filestore.snapshot import Snapshot

if TYPE_CHECKING:
    from filestore.table import Table

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
class FileRefs:
    """Files one or more snapshots reference."""

    data: frozenset[str]
    manifests: frozenset[str]


def snapshot_manifests(table: Table, snap: Snapshot) -> set[str]:
    """Manifest lists and manifests a snapshot references."""
    store = table.manifest_store
    names: set[str] = set()
    for lst in (snap.base_manifest_list, snap.delta_manifest_list, snap.changelog_manifest_list):
        if lst:
            names.add(lst)
            names.update(m.file_name for m in store.read_list(lst))
    return names


def snapshot_refs(table: Table, snap: Snapshot) -> FileRefs:
    """Live data files, changelog files and manifests of one snapshot."""
    store = table.manifest_store
    live = merge_entries(store.read_entries([snap.base_manifest_list, snap.delta_manifest_list]))
    data = {e.file.file_name for e in live}
    if snap.changelog_manifest_list:
        data.update(e.file.file_name for e in store.read_entries([snap.changelog_manifest_list]))
    return FileRefs(frozenset(data), frozenset(snapshot_manifests(table, snap)))


def tag_refs(table: Table, exclude: str | None = None) -> FileRefs:
    from filestore.tags import list_tags

    data: set[str] = set()
    manifests: set[str] = set()
    for name, snap in list_tags(table):
        if name == exclude:
            continue
        refs = snapshot_refs(table, snap)
        data |= refs.data
        manifests |= refs.manifests
    return FileRefs(frozenset(data), frozenset(manifests))


def _entry_path(table: Table, e: ManifestEntry) -> str:
    return table.paths.data_file(
        table.schema.partition_keys, e.partition, e.bucket, e.file.file_name
    )


@dataclass(frozen=True)
class Retention:
    """How many snapshots to keep and for how long."""

    min_retained: int
    max_retained: int
    time_retained_ms: int

    @classmethod
    def of(cls, table: Table) -> Retention:
        o = table.options
        return cls(
            o.snapshot_num_retained_min, o.snapshot_num_retained_max, o.snapshot_time_retained_ms
        )


def expire_range_end(table: Table, retention: Retention, now_ms: int | None = None) -> int | None:
    """The new earliest snapshot id under the retention (None: nothing to expire)."""
    manager = table.snapshot_manager
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
    return end if end > earliest else None


def expire_snapshots(
    table: Table,
    *,
    retain_min: int | None = None,
    retain_max: int | None = None,
    older_than_ms: int | None = None,
    now_ms: int | None = None,
) -> ExpireResult:
    """Expire snapshots; arguments override the table's retention options."""
    base = Retention.of(table)
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
    end = expire_range_end(table, retention, now_ms)
    if end is None:
        return ExpireResult(earliest=table.snapshot_manager.earliest_id())
    return expire_until(table, end)


def expire_until(table: Table, new_earliest: int) -> ExpireResult:
    """Delete snapshots with id < new_earliest and the files only they referenced."""
    manager = table.snapshot_manager
    store = table.manifest_store
    result = ExpireResult()
    earliest = manager.earliest_id()
    latest = manager.latest_id()
    if earliest is None or latest is None or new_earliest <= earliest:
        result.earliest = earliest
        return result
    new_earliest = min(new_earliest, latest)
    keep = manager.get(new_earliest)
    tags = tag_refs(table)
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
        for e in store.read_entries([snap.delta_manifest_list]):
            if e.kind == DELETE and e.file.file_name not in tags.data:
                doomed.append(e)
    changelog: list[ManifestEntry] = []
    for snap in expired:
        if snap.changelog_manifest_list:
            for e in store.read_entries([snap.changelog_manifest_list]):
                if e.kind == ADD and e.file.file_name not in tags.data:
                    changelog.append(e)
    kept_manifests = snapshot_manifests(table, keep) | tags.manifests
    manifests: set[str] = set()
    for snap in expired:
        manifests |= snapshot_manifests(table, snap)
    manifests -= kept_manifests
    for e in doomed:
        table.io.delete_file(_entry_path(table, e))
    for e in changelog:
        table.io.delete_file(_entry_path(table, e))
    for name in manifests:
        table.io.delete_file(table.paths.manifest(name))
    # EARLIEST first: a reader never starts from a snapshot being deleted
    table.io.write_bytes(table.paths.earliest_hint, str(new_earliest).encode())
    for snap in expired:
        table.io.delete_file(table.paths.snapshot(snap.id))
    result.expired_snapshots = [s.id for s in expired]
    result.deleted_data_files = len(doomed)
    result.deleted_changelog_files = len(changelog)
    result.deleted_manifests = len(manifests)
    result.earliest = new_earliest
    if expired:
        log.info(
            "table %s: expired snapshots %d..%d (%d data files, %d manifests deleted)",
            table.name,
            expired[0].id,
            expired[-1].id,
            len(doomed),
            len(manifests),
        )
    return result


def expire_after_commit(table: Table) -> ExpireResult | None:
    """Cheap check after each commit; expires only when the retention options say so."""
    end = expire_range_end(table, Retention.of(table))
    return expire_until(table, end) if end is not None else None


# -- orphans -------------------------------------------------------------------
@dataclass
class OrphanResult:
    deleted: list[str] = field(default_factory=list)
    kept_recent: int = 0
    bytes: int = 0


def referenced_files(table: Table) -> FileRefs:
    """Every file any existing snapshot or tag mentions (added or deleted, data or changelog)."""
    data: set[str] = set()
    manifests: set[str] = set()
    snaps: list[Snapshot] = list(table.snapshot_manager.iter_backwards())
    from filestore.tags import list_tags

    snaps += [s for _, s in list_tags(table)]
    seen_lists: set[str] = set()
    for snap in snaps:
        for lst in (
            snap.base_manifest_list,
            snap.delta_manifest_list,
            snap.changelog_manifest_list,
        ):
            if not lst or lst in seen_lists:
                continue
            seen_lists.add(lst)
            manifests.add(lst)
            for meta in table.manifest_store.read_list(lst):
                if meta.file_name in manifests:
                    continue
                manifests.add(meta.file_name)
                for e in table.manifest_store.read_manifest(meta.file_name):
                    data.add(e.file.file_name)
    return FileRefs(frozenset(data), frozenset(manifests))


def _candidates(table: Table) -> Iterable[pafs.FileInfo]:
    selector = pafs.FileSelector(table.paths.root, recursive=True, allow_not_found=True)
    for info in table.io.fs.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        base = info.base_name
        if base.startswith(("data-", "changelog-", "manifest-")) or base.endswith(".tmp"):
            yield info


def remove_orphans(
    table: Table, older_than_ms: int = DAY_MS, *, now_ms: int | None = None, dry_run: bool = False
) -> OrphanResult:
    """Delete data/changelog/manifest files no snapshot or tag references, older than the window."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = now_ms - older_than_ms
    # list first, then read references: a file committed meanwhile is then referenced
    candidates = list(_candidates(table))
    refs = referenced_files(table)
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
            table.io.delete_file(info.path)
    return result
