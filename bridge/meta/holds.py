"""Expiration holds for consistent versions: what a strong read may pin is kept.

A strong read pins the newest barrier every table of its set completed, so while one
table lags, the others' snapshots of that barrier age; once older than their
``snapshot.time-retained``, expiration removed them and the read failed. The
MetaService knows each table's oldest point a strong read may pin
(``Store.consistent_points``) and records it on the table as a FileStore consumer,
``HOLD_CONSUMER``, whose position expiration keeps, as it keeps a streaming reader's
(Paimon's ``consumer-id``).

A hold moves only when its point does, and is recorded at that moment. A set that stops
advancing (a job down for good) therefore holds its tables' snapshots for the tables'
``consumer.expiration-time`` (1 day by default) after its last advance, and no longer:
the consumer lapses then, as a stopped stream's does. A table that leaves every set of
two or more loses its hold at once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from bridge.meta.consistency import BarrierPoint
from filestore import Catalog, Table
from filestore.errors import FileStoreError, TableNotFound

log = logging.getLogger(__name__)

#: the consumer id of the holds, on every table that has one
HOLD_CONSUMER = "dts-consistent-version"


@dataclass(frozen=True)
class HoldChange:
    table: str
    next_snapshot: int | None  # None: released


class ConsistentHolds:
    """Keeps each table's hold where its consistent point is, in ``catalog``."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def apply(self, points: Mapping[str, BarrierPoint | None]) -> list[HoldChange]:
        """Record, move or release each table's hold to match ``points``; the changes.
        Tables not in this warehouse (another one's, a log-only table) are passed over;
        a table whose hold cannot be read or written is logged and passed over, so one
        damaged table never stops the others' holds from moving."""
        changes = []
        for name, point in sorted(points.items()):
            try:
                change = _apply(self.catalog.get_table(name), point)
            except TableNotFound:
                continue
            except (FileStoreError, OSError, ValueError) as exc:
                log.warning(
                    "consistent-version hold of %s not moved (%s: %s); the next pass tries again",
                    name,
                    type(exc).__name__,
                    exc,
                )
                continue
            if change is not None:
                changes.append(change)
        if changes:
            log.info("consistent-version holds: %s", ", ".join(map(_describe, changes)))
        return changes


def _apply(table: Table, point: BarrierPoint | None) -> HoldChange | None:
    if point is None or point.snapshot_id is None:
        # one read of the hold's file, not a listing of every consumer: most tables
        # (those of no set) pass here each minute
        return HoldChange(table.name, None) if table.delete_consumer(HOLD_CONSUMER) else None
    held = next((c for c in table.consumers() if c.consumer_id == HOLD_CONSUMER), None)
    # a consumer keeps from the snapshot before its next one: next = the point's + 1
    # keeps exactly the point's snapshot and everything after it
    wanted = point.snapshot_id + 1
    if held is not None and held.next_snapshot == wanted:
        return None
    table.record_consumer(HOLD_CONSUMER, wanted)
    return HoldChange(table.name, wanted)


def _describe(change: HoldChange) -> str:
    if change.next_snapshot is None:
        return f"{change.table} released"
    return f"{change.table} from snapshot {change.next_snapshot - 1}"
