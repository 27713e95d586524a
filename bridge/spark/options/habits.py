"""Options users type from Delta Lake and Spark's Kafka source, mapped onto dts's own.

- Delta `versionAsOf` = `snapshot-id` (a Delta version is a dts snapshot id);
  `timestampAsOf` = `timestamp` (epoch ms or an ISO date/time; naive times are UTC).
- Delta `readChangeFeed` (alias `readChangeData`) with `startingVersion` /
  `endingVersion` (both inclusive, as in Delta) or `startingTimestamp` /
  `endingTimestamp`: a changes read whose rows carry Delta's `_change_type`
  (insert, update_preimage, update_postimage, delete) beside `_row_kind`. On a
  stream `startingVersion`/`startingTimestamp` pick where it starts.
- Kafka `startingOffsets` (`earliest`, `latest` or `{"<topic>": {"<partition>": offset}}`
  with -2 = earliest and -1 = latest) and `maxOffsetsPerTrigger` (record-level
  admission) on the log tier.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from bridge.spark.errors import OptionError

if TYPE_CHECKING:
    from filestore import Table

CHANGE_TYPE = "_change_type"
# _row_kind -> Delta's _change_type, in the same order
ROW_KINDS = ("+I", "-U", "+U", "-D")
CHANGE_TYPES = ("insert", "update_preimage", "update_postimage", "delete")
EARLIEST, LATEST = -2, -1


def parse_time_ms(key: str, raw: str) -> int:
    """Epoch milliseconds from an integer or an ISO date/time (naive = UTC)."""
    raw = raw.strip()
    if raw.lstrip("-").isdigit():
        return int(raw)
    try:
        dt = datetime.fromisoformat(raw)
    except ValueError:
        raise OptionError(
            f"option {key!r} must be epoch milliseconds or an ISO date/time such as "
            f"'2026-01-31 12:00:00', got {raw!r}"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


@dataclass(frozen=True)
class ChangeFeed:
    """A Delta-style change feed request; versions are inclusive snapshot ids."""

    starting_version: int | None = None
    ending_version: int | None = None
    starting_ms: int | None = None
    ending_ms: int | None = None

    def resolve(self, table: Table) -> tuple[int, int] | None:
        """(start exclusive, end inclusive) snapshot ids, or None when the range is empty."""
        latest = table.latest_snapshot()
        if latest is None:
            return None
        if self.starting_version is not None:
            start = self.starting_version - 1
        else:
            assert self.starting_ms is not None
            before = table.snapshot_at_time(self.starting_ms - 1)
            start = 0 if before is None else int(before.id)
        end = int(latest.id)
        if self.ending_version is not None:
            end = min(end, self.ending_version)
        elif self.ending_ms is not None:
            at = table.snapshot_at_time(self.ending_ms)
            end = 0 if at is None else int(at.id)
        return (start, end) if end > start else None


def change_feed(low: dict[str, str], streaming_ok: bool = True) -> ChangeFeed | None:
    """The change feed asked for by Delta's options, or None."""
    on = low.get("readchangefeed", low.get("readchangedata", "false")).lower()
    if on not in ("true", "false"):
        raise OptionError(f"option 'readChangeFeed' must be true or false, got {on!r}")
    keys = ("startingversion", "endingversion", "startingtimestamp", "endingtimestamp")
    given = [k for k in keys if low.get(k) not in (None, "")]
    if on == "false":
        if given:
            raise OptionError(
                f"options {given} only apply with .option('readChangeFeed', 'true') "
                "(a changes read); for time travel use versionAsOf / timestampAsOf"
            )
        return None

    def version(k: str) -> int | None:
        raw = low.get(k)
        if raw in (None, ""):
            return None
        try:
            return int(raw)
        except ValueError:
            raise OptionError(f"option {k!r} must be a snapshot id, got {raw!r}") from None

    feed = ChangeFeed(
        starting_version=version("startingversion"),
        ending_version=version("endingversion"),
        starting_ms=parse_time_ms("startingTimestamp", low["startingtimestamp"])
        if low.get("startingtimestamp")
        else None,
        ending_ms=parse_time_ms("endingTimestamp", low["endingtimestamp"])
        if low.get("endingtimestamp")
        else None,
    )
    if (feed.starting_version is None) == (feed.starting_ms is None):
        raise OptionError(
            "readChangeFeed needs exactly one of startingVersion or startingTimestamp"
        )
    if feed.ending_version is not None and feed.ending_ms is not None:
        raise OptionError("give at most one of endingVersion, endingTimestamp")
    return feed


def starting_offsets(raw: str | None, topic: str | None = None) -> str | dict[int, int] | None:
    """Kafka's `startingOffsets`: "earliest", "latest" or {partition: offset (-2/-1 allowed)}."""
    if raw is None or raw == "":
        return None
    if raw.lower() in ("earliest", "latest"):
        return raw.lower()
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or len(doc) != 1 or not isinstance(next(iter(doc.values())), dict):
        raise OptionError(
            "option 'startingOffsets' must be earliest, latest or JSON like "
            f'{{"<topic>": {{"0": 42, "1": -2}}}} (-2 earliest, -1 latest), got {raw!r}'
        )
    name, parts = next(iter(doc.items()))
    if topic is not None and name != topic:
        raise OptionError(
            f"option 'startingOffsets' names topic {name!r}; the table's is {topic!r}"
        )
    try:
        return {int(p): int(o) for p, o in parts.items()}
    except (TypeError, ValueError):
        raise OptionError(
            f"option 'startingOffsets': offsets must be integers, got {raw!r}"
        ) from None


def with_change_type(batch: pa.RecordBatch | pa.Table, row_kind: str) -> Any:
    """Append Delta's `_change_type` derived from `_row_kind` (vectorized lookup)."""
    idx = pc.index_in(batch.column(row_kind), value_set=pa.array(ROW_KINDS))
    types = pa.array(CHANGE_TYPES).take(idx)
    return batch.append_column(CHANGE_TYPE, types)
