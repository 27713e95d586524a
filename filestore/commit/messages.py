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
    """New (and, for compaction, deleted) files of one partition/bucket.

    ``TableWrite.prepare`` makes them; ``TableCommit.commit`` publishes them.

    Attributes:
        partition: the partition's values as strings (None for null), in the order of
            the table's partition keys; ``()`` for an unpartitioned table.
        bucket: the bucket number.
        total_buckets: the table's bucket count when the files were written.
        new_files: data files to add.
        deleted_files: files a compaction replaced: removed from the table by the commit.
        changelog_files: changelog files written with the data (``changelog-producer``).

    Example:
        >>> messages = write.prepare()  # in a bucket writer
        >>> wire = [m.to_json() for m in messages]  # to the committer, as JSON
        >>> snap = table.new_commit("loader").commit(
        ...     [CommitMessage.from_json(d) for d in wire], CommitProperties(identifier=7)
        ... )
    """

    partition: tuple[str | None, ...]
    bucket: int
    total_buckets: int
    new_files: tuple[DataFileMeta, ...] = ()
    # files a compaction replaced (issue 3): removed from the table by the commit
    deleted_files: tuple[DataFileMeta, ...] = ()
    changelog_files: tuple[DataFileMeta, ...] = field(default=())

    @property
    def is_empty(self) -> bool:
        """True when the message carries no file at all."""
        return not (self.new_files or self.deleted_files or self.changelog_files)

    def to_json(self) -> dict[str, Any]:
        """The message as JSON-ready data.

        Returns:
            A dict ``from_json`` reads back into an equal message.
        """
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
        """Read a message back from ``to_json``'s form.

        Args:
            d: the dict ``to_json`` gave (possibly through a JSON round trip).

        Returns:
            The message.
        """
        return cls(
            partition=tuple(d["partition"]),
            bucket=int(d["bucket"]),
            total_buckets=int(d["total_buckets"]),
            new_files=tuple(DataFileMeta.from_json(f) for f in d.get("new_files", [])),
            deleted_files=tuple(DataFileMeta.from_json(f) for f in d.get("deleted_files", [])),
            changelog_files=tuple(DataFileMeta.from_json(f) for f in d.get("changelog_files", [])),
        )
