"""CommitMessage: the files one writer prepared for one partition/bucket.

Messages travel between processes (bucket writers -> the table's committer) as
JSON: ``CommitMessage.from_json(m.to_json()) == m``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from filestore.format.data_file import DataFileMeta


@dataclass(frozen=True)
class CommitMessage:
    """New (and, for compaction, deleted) files of one partition/bucket."""

    partition: tuple[str | None, ...]
    bucket: int
    total_buckets: int
    new_files: tuple[DataFileMeta, ...] = ()
    # files a compaction replaced (issue 3): removed from the table by the commit
    deleted_files: tuple[DataFileMeta, ...] = ()
    changelog_files: tuple[DataFileMeta, ...] = field(default=())

    @property
    def is_empty(self) -> bool:
        return not (self.new_files or self.deleted_files or self.changelog_files)

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": list(self.partition),
            "bucket": self.bucket,
            "total_buckets": self.total_buckets,
            "new_files": [f.to_json() for f in self.new_files],
            "deleted_files": [f.to_json() for f in self.deleted_files],
            "changelog_files": [f.to_json() for f in self.changelog_files],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CommitMessage:
        return cls(
            partition=tuple(d["partition"]),
            bucket=int(d["bucket"]),
            total_buckets=int(d["total_buckets"]),
            new_files=tuple(DataFileMeta.from_json(f) for f in d.get("new_files", [])),
            deleted_files=tuple(DataFileMeta.from_json(f) for f in d.get("deleted_files", [])),
            changelog_files=tuple(DataFileMeta.from_json(f) for f in d.get("changelog_files", [])),
        )
