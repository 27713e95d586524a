"""What the pipeline keeps on disk: directory sizes, and per table its bytes and the
FileStore metadata that compaction and expiration must keep bounded."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bridge.exporter import Warehouse
from filestore import Catalog, CommitKind
from filestore.state.refs import snapshot_manifests


@dataclass(frozen=True)
class DirUsage:
    bytes: int = 0
    files: int = 0

    def __add__(self, other: DirUsage) -> DirUsage:
        return DirUsage(self.bytes + other.bytes, self.files + other.files)


def dir_usage(path: Path) -> DirUsage:
    """Bytes on disk (allocated blocks, as ``du`` counts them: Kafka preallocates each
    segment's two index files at 10 MB, sparse) and files under ``path``, nothing when
    absent; files deleted while it walks (expiration, retention) are skipped."""
    size = files = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                size += os.stat(os.path.join(root, name), follow_symlinks=False).st_blocks * 512
            except OSError:
                continue
            files += 1
    return DirUsage(size, files)


def dirs_usage(paths: Iterable[Path]) -> DirUsage:
    total = DirUsage()
    for path in paths:
        total = total + dir_usage(path)
    return total


@dataclass(frozen=True)
class TableUsage:
    bytes: int  # on disk, everything under the table's directory
    files_per_bucket: int  # live data files of the latest snapshot, the fullest bucket's
    manifests: int  # manifest lists and manifests the latest snapshot references
    snapshots: int  # retained
    compactions: int  # of those, the compactions' (commit kind COMPACT)
    appends: int  # the others: the barriers' commits of changes (APPEND, OVERWRITE)


def table_usage(catalog: Catalog, warehouse: Warehouse, name: str) -> TableUsage:
    # a fresh handle each time: a table handle caches decoded files for its commits, which
    # would grow this process, not the pipeline
    table = catalog.get_table(name)
    snapshot = table.latest_snapshot()
    per_bucket: Counter[tuple[tuple[str | None, ...], int]] = Counter()
    manifests = 0
    if snapshot is not None:  # the latest snapshot is never expired: its files stay
        # a bucket's files may come in several splits: counted by (partition, bucket)
        for split in table.new_scan(snapshot_id=snapshot.id).plan():
            per_bucket[(split.partition_values, split.bucket)] += len(split.files)
        manifests = len(snapshot_manifests(table, snapshot))
    # one read of the retained snapshots gives the total and its two kinds, which then
    # add up (a listing beside it could see an expiration the read did not)
    kinds = Counter(s.commit_kind == CommitKind.COMPACT for s in table.snapshots())
    return TableUsage(
        dir_usage(Path(warehouse.table_dir(name))).bytes,
        max(per_bucket.values(), default=0),
        manifests,
        kinds[True] + kinds[False],
        kinds[True],
        kinds[False],
    )
