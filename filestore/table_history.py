"""TableHistory: a table's snapshots, tags and rollback, the half of ``Table`` about time.

A base class of ``Table`` (which adds schema changes, writing, reading and
maintenance), split off only so that each module stays under the 500 lines
tests/test_import_directions.py allows once every public method documents its
arguments: ``Table``'s API and behaviour are exactly those of one class.
Like ``Table`` it only delegates to the operation modules below it.
"""

from __future__ import annotations

from filestore.errors import SnapshotNotFound
from filestore.format.snapshot import Snapshot
from filestore.iceberg import sync_iceberg
from filestore.maintenance.expire import delete_tag
from filestore.maintenance.rollback import RollbackResult, rollback_to
from filestore.state.consumers import Consumer, delete_consumer, list_consumers, record_consumer
from filestore.state.context import TableContext
from filestore.state.tags import create_tag, list_tags, tag_snapshot

__all__ = ["TableHistory"]


class TableHistory(TableContext):
    """Time travel over one table: snapshots by id, barrier, time or tag; tags; rollback.

    Example:
        >>> snap = table.create_tag("before-backfill")
        >>> table.resolve_snapshot(tag="before-backfill") == snap
        True
    """

    # -- snapshots ------------------------------------------------------
    def snapshots(self) -> list[Snapshot]:
        """Every snapshot still on disk (not expired), oldest first.

        Returns:
            The snapshots in id order; empty for a table never committed to.
        """
        return self.snapshot_manager.all()

    def latest_snapshot(self) -> Snapshot | None:
        """The newest snapshot.

        Returns:
            The latest snapshot, or None for a table never committed to.
        """
        return self.snapshot_manager.latest()

    def snapshot(self, snapshot_id: int) -> Snapshot:
        """One snapshot by id.

        Args:
            snapshot_id: the snapshot's id (ids start at 1 and increase by one).

        Returns:
            The snapshot.

        Raises:
            SnapshotNotFound: it expired or was never committed.
        """
        return self.snapshot_manager.get(snapshot_id)

    def snapshot_at_barrier(self, barrier: int) -> Snapshot | None:
        """Greatest snapshot whose barrier is <= barrier (snapshots without one are skipped).

        Args:
            barrier: a source barrier id (what ``CommitProperties.barrier`` recorded).

        Returns:
            That snapshot, or None when no snapshot at or before ``barrier`` remains.
        """
        return self.snapshot_manager.at_barrier(barrier)

    def snapshot_for_barrier(self, barrier: int) -> Snapshot | None:
        """The snapshot committed for exactly ``barrier``: the one its committer wrote (a
        compaction stamped with the same barrier is not it); None if none carries it.

        Args:
            barrier: the source barrier id the commit recorded.

        Returns:
            That snapshot, or None.
        """
        return self.snapshot_manager.for_barrier(barrier)

    def snapshot_at_time(self, time_millis: int) -> Snapshot | None:
        """Greatest snapshot committed at or before time_millis (epoch ms).

        Args:
            time_millis: a point in time, milliseconds since the Unix epoch.

        Returns:
            That snapshot, or None when none that old remains.
        """
        return self.snapshot_manager.at_time(time_millis)

    def tag_snapshot(self, tag: str) -> Snapshot:
        """The snapshot a tag points at (tags are snapshot JSON files under tag/).

        Args:
            tag: the tag's name.

        Returns:
            The tagged snapshot (kept even after it expired from ``snapshots()``).

        Raises:
            SnapshotNotFound: the table has no such tag.
        """
        return tag_snapshot(self, tag)

    def resolve_snapshot(
        self,
        snapshot_id: int | None = None,
        *,
        barrier: int | None = None,
        timestamp: int | None = None,
        tag: str | None = None,
    ) -> Snapshot | None:
        """The snapshot a read asks for (latest by default; None for an empty table).

        Give at most one of the arguments.

        Args:
            snapshot_id: exactly this snapshot.
            barrier: the greatest snapshot at or before this source barrier.
            timestamp: the greatest snapshot committed at or before this epoch-ms time.
            tag: the snapshot this tag points at.

        Returns:
            The snapshot; with no argument the latest, None for an empty table.

        Raises:
            SnapshotNotFound: no snapshot matches (expired, too early, unknown tag).
            ValueError: more than one argument was given.
        """
        given = [x is not None for x in (snapshot_id, barrier, timestamp, tag)]
        if sum(given) > 1:
            raise ValueError("give at most one of snapshot_id, barrier, timestamp, tag")
        if snapshot_id is not None:
            return self.snapshot(snapshot_id)
        if tag is not None:
            return self.tag_snapshot(tag)
        if barrier is not None:
            snap = self.snapshot_at_barrier(barrier)
            if snap is None:
                raise SnapshotNotFound(
                    f"table {self.name} has no snapshot at or before barrier {barrier}"
                )
            return snap
        if timestamp is not None:
            snap = self.snapshot_at_time(timestamp)
            if snap is None:
                raise SnapshotNotFound(
                    f"table {self.name} has no snapshot at or before time {timestamp}"
                )
            return snap
        return self.latest_snapshot()

    # -- tags and rollback ----------------------------------------------
    def create_tag(self, name: str, snapshot_id: int | None = None) -> Snapshot:
        """Name a snapshot (kept until the tag is deleted); an Iceberg tag too when the
        table writes Iceberg metadata.

        Args:
            name: the tag's name: ``[A-Za-z0-9][A-Za-z0-9_.-]*``, at most 200 characters.
            snapshot_id: the snapshot to tag; None tags the latest.

        Returns:
            The tagged snapshot.

        Raises:
            TagError: the tag exists already, or the name is not allowed.
            SnapshotNotFound: no such snapshot, or the table has none yet.
        """
        snap = create_tag(self, name, snapshot_id)
        sync_iceberg(self)
        return snap

    def list_tags(self) -> list[tuple[str, Snapshot]]:
        """Every tag of the table.

        Returns:
            ``(name, snapshot)`` pairs ordered by snapshot id, then name.
        """
        return list_tags(self)

    def consumers(self) -> list[Consumer]:
        """The streaming readers whose positions hold back expiration (``consumer-id``).

        Returns:
            Each consumer's id, next snapshot and last update (ms), by id.
        """
        return list_consumers(self)

    def record_consumer(self, consumer_id: str, next_snapshot: int) -> Consumer:
        """Record (or move) a consumer: nothing from ``next_snapshot - 1`` on expires
        while it is updated within ``consumer.expiration-time``.

        Args:
            consumer_id: ``[A-Za-z0-9][A-Za-z0-9_.-]*``, at most 200 characters.
            next_snapshot: the first snapshot it has not read.

        Returns:
            The recorded consumer.

        Raises:
            InvalidOption: the id is not allowed.
        """
        return record_consumer(self, consumer_id, next_snapshot)

    def delete_consumer(self, consumer_id: str) -> bool:
        """Forget a consumer whose stream is gone, so it holds nothing back.

        Args:
            consumer_id: the consumer's id.

        Returns:
            Whether it existed.
        """
        return delete_consumer(self, consumer_id)

    def delete_tag(self, name: str) -> Snapshot:
        """Remove a tag; files only it kept alive (its snapshot expired) are deleted too.

        Args:
            name: the tag's name.

        Returns:
            The snapshot the tag pointed at.

        Raises:
            SnapshotNotFound: the table has no such tag.
        """
        snap = delete_tag(self, name)
        sync_iceberg(self)
        return snap

    def rollback_to(
        self, snapshot_id: int | None = None, *, tag: str | None = None
    ) -> RollbackResult:
        """Make a snapshot (or a tag) the latest again; stop writers first.

        Later snapshots and the files only they referenced are deleted.

        Args:
            snapshot_id: the snapshot to return to; give this or ``tag``.
            tag: the tag whose snapshot to return to (works after it expired).

        Returns:
            The snapshot now latest, the ids of the snapshots removed and the number of
            files deleted.

        Raises:
            SnapshotNotFound: no such snapshot or tag, or the table has no snapshots.
            ValueError: neither or both of ``snapshot_id`` and ``tag`` were given.
        """
        return rollback_to(self, snapshot_id, tag=tag)
