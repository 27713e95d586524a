"""Snapshots: JSON files ``snapshot/snapshot-N`` and the LATEST/EARLIEST hints."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import Any

from filestore.errors import SnapshotNotFound
from filestore.format.paths import TablePaths
from filestore.io.fileio import FileIO


class CommitKind(StrEnum):
    """What a snapshot's commit did (``Snapshot.commit_kind``, stored as its name)."""

    APPEND = "APPEND"  # new rows (the worker's barrier commits, batch writes)
    COMPACT = "COMPACT"  # the same rows rewritten; may carry the latest barrier
    OVERWRITE = "OVERWRITE"  # a partition or the table replaced


# the kinds under their own names (for callers outside filestore)
APPEND = CommitKind.APPEND
COMPACT = CommitKind.COMPACT
OVERWRITE = CommitKind.OVERWRITE
COMMIT_KINDS = tuple(CommitKind)


def barrier_snapshots(snapshots: Iterable[Snapshot]) -> dict[int, Snapshot]:
    """barrier -> the snapshot committed *for* it: the first one carrying that barrier
    that is not a compaction (a compaction stamped with the barrier holds the same rows,
    but the committer's snapshot is the one reported and rebuilt); a compaction only
    when nothing else carries the barrier (its commit expired)."""
    points: dict[int, Snapshot] = {}
    for snap in sorted(snapshots, key=lambda s: s.id):
        if snap.barrier is None:
            continue
        held = points.get(snap.barrier)
        if held is None or (
            held.commit_kind == CommitKind.COMPACT and snap.commit_kind != CommitKind.COMPACT
        ):
            points[snap.barrier] = snap
    return points


@dataclass(frozen=True)
class Snapshot:
    """One committed version of a table (DESIGN.md "On disk: the FileStore").

    Immutable once written; docs/formats.md (3.3) describes each field of the JSON.

    Attributes:
        id: N; ids are consecutive from 1.
        schema_id: the schema version the commit used.
        base_manifest_list: manifest list (file name in ``manifest/``) of everything
            before this commit.
        delta_manifest_list: manifest list of this commit's changes only.
        changelog_manifest_list: manifest list of this commit's changelog files, or None.
        commit_user: who committed (the worker: ``dts-worker``).
        commit_identifier: the commit user's commit number (the worker: the barrier id).
        commit_kind: ``APPEND``, ``COMPACT`` or ``OVERWRITE`` (``CommitKind``).
        time_millis: the commit's wall-clock time, epoch ms.
        barrier: the greatest source barrier whose data every bucket holds, or None.
        log_offsets: log partition (= bucket) -> next offset to read after the
            barrier's marker, merged over the previous snapshot's; None if never given.
        total_record_count: rows in live files (retraction rows included).
        delta_record_count: rows added minus rows removed by this commit.
        changelog_record_count: rows in this commit's changelog files.
        max_sequence_number: the table's greatest ``_SEQUENCE_NUMBER`` (-1: none).
        version: the format version, 1.

    Example:
        >>> snap = table.latest_snapshot()
        >>> snap.id, snap.commit_kind, snap.barrier
        (1, 'APPEND', None)
        >>> Snapshot.from_json(snap.to_json()) == snap
        True
    """

    id: int
    schema_id: int
    base_manifest_list: str
    delta_manifest_list: str
    changelog_manifest_list: str | None
    commit_user: str
    commit_identifier: int
    commit_kind: str
    time_millis: int
    barrier: int | None = None
    log_offsets: dict[int, int] | None = None
    total_record_count: int = 0
    delta_record_count: int = 0
    changelog_record_count: int = 0
    # Greatest _SEQUENCE_NUMBER in the table: writers start above it.
    max_sequence_number: int = -1
    version: int = 1

    def to_json(self) -> dict[str, Any]:
        """The stored form (``log_offsets`` keys as strings, as JSON needs).

        Returns:
            A JSON-ready dict; ``from_json`` reads it back.
        """
        d = asdict(self)
        if self.log_offsets is not None:
            d["log_offsets"] = {str(k): v for k, v in self.log_offsets.items()}
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Snapshot:
        """Read the stored form back; fields this version does not know are ignored.

        Args:
            d: a dict as ``to_json`` gives (or a snapshot file parsed).

        Returns:
            The snapshot.
        """
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known}
        if kwargs.get("log_offsets") is not None:
            kwargs["log_offsets"] = {int(k): int(v) for k, v in kwargs["log_offsets"].items()}
        return cls(**kwargs)

    def to_bytes(self) -> bytes:
        """The snapshot file's content.

        Returns:
            ``to_json()`` as indented UTF-8 JSON.
        """
        return json.dumps(self.to_json(), indent=2).encode()


def _hint(io: FileIO, path: str) -> int | None:
    data = io.try_read_bytes(path)
    if data is None:
        return None
    try:
        return int(data.decode().strip())
    except ValueError:
        return None


class SnapshotManager:
    """Finds and reads snapshots; hints are used as starting points, never trusted."""

    def __init__(self, io: FileIO, paths: TablePaths) -> None:
        self.io = io
        self.paths = paths

    def exists(self, snapshot_id: int) -> bool:
        return self.io.exists(self.paths.snapshot(snapshot_id))

    def get(self, snapshot_id: int) -> Snapshot:
        data = self.io.try_read_bytes(self.paths.snapshot(snapshot_id))
        if data is None:
            raise SnapshotNotFound(
                f"snapshot {snapshot_id} does not exist (expired or never committed)"
            )
        return Snapshot.from_json(json.loads(data))

    def list_ids(self) -> list[int]:
        ids = []
        for info in self.io.list_dir(self.paths.snapshot_dir):
            name = info.base_name
            if name.startswith("snapshot-") and name[9:].isdigit():
                ids.append(int(name[9:]))
        return sorted(ids)

    def latest_id(self) -> int | None:
        hint = _hint(self.io, self.paths.latest_hint)
        if hint is not None and self.exists(hint):
            # the hint may lag behind: walk forward to the real end
            n = hint
            while self.exists(n + 1):
                n += 1
            return n
        ids = self.list_ids()
        return ids[-1] if ids else None

    def expiring_below(self) -> int | None:
        """The EARLIEST an expiration wrote: snapshots below it are being deleted even
        while their files are still there."""
        return _hint(self.io, self.paths.earliest_hint)

    def earliest_id(self) -> int | None:
        hint = _hint(self.io, self.paths.earliest_hint)
        if hint is not None and self.exists(hint) and not self.exists(hint - 1):
            return hint
        ids = self.list_ids()
        return ids[0] if ids else None

    def latest(self) -> Snapshot | None:
        n = self.latest_id()
        return self.get(n) if n is not None else None

    def iter_backwards(
        self, start: int | None = None, down_to: int | None = None
    ) -> Iterator[Snapshot]:
        """Snapshots from ``start`` (the latest) down to ``down_to`` (the earliest), newest
        first, skipping ones expired meanwhile. Files are read one at a time as the caller
        goes on: a walk that stops early costs what it read, not the table's history."""
        latest = self.latest_id() if start is None else start
        if latest is None:
            return
        # The earliest is looked up at the first missing id only: on an object store it
        # costs five requests, and most walks (the latest barrier, a commit's conflict
        # check) stop before they reach a gap.
        lowest = 1 if down_to is None else max(down_to, 1)
        earliest: int | None = None
        n = latest
        while n >= lowest:
            data = self.io.try_read_bytes(self.paths.snapshot(n))
            if data is not None:
                yield Snapshot.from_json(json.loads(data))
            elif earliest is None:
                earliest = self.earliest_id()
                if earliest is None:
                    return
                # never below the earliest: a stream far behind would try-read every expired id
                lowest = max(lowest, earliest)
            n -= 1

    def all(self) -> list[Snapshot]:
        snaps = list(self.iter_backwards())
        snaps.reverse()
        return snaps

    def try_commit(self, snapshot: Snapshot) -> bool:
        """Atomically create snapshot-N; False if another committer won N."""
        if not self.io.create_if_absent(self.paths.snapshot(snapshot.id), snapshot.to_bytes()):
            return False
        self.io.write_bytes(self.paths.latest_hint, str(snapshot.id).encode())
        if snapshot.id == 1 or not self.io.exists(self.paths.earliest_hint):
            self.io.write_bytes(
                self.paths.earliest_hint, str(self.earliest_id() or snapshot.id).encode()
            )
        return True

    def for_barrier(self, barrier: int) -> Snapshot | None:
        """The snapshot committed for exactly ``barrier`` (see :func:`barrier_snapshots`)."""
        carrying: list[Snapshot] = []
        for snap in self.iter_backwards():
            if snap.barrier is not None and snap.barrier < barrier:
                break
            if snap.barrier == barrier:
                carrying.append(snap)
        return barrier_snapshots(carrying).get(barrier)

    def at_barrier(self, barrier: int) -> Snapshot | None:
        """Greatest snapshot whose barrier is known and <= barrier (what to read at it)."""
        for snap in self.iter_backwards():
            if snap.barrier is not None and snap.barrier <= barrier:
                return snap
        return None

    def at_time(self, time_millis: int) -> Snapshot | None:
        """Greatest snapshot committed at or before time_millis."""
        for snap in self.iter_backwards():
            if snap.time_millis <= time_millis:
                return snap
        return None
