"""Consumers: where a streaming reader will read next, so expiration keeps what it has not
read yet (``consumer/consumer-<id>`` holds ``{"nextSnapshot": N, "updatedMillis": T}``).

A stream that falls behind, or stops for a while, otherwise finds its next snapshot
expired and fails (Paimon's ``consumer-id`` answers the same). A consumer not updated for
``consumer.expiration-time`` holds nothing any more and its file goes at the next
expiration, so a stream dropped for good never pins the table's history.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from filestore.format.identifiers import check_identifier
from filestore.state.context import TableContext


@dataclass(frozen=True)
class Consumer:
    """A reader's recorded position: the first snapshot it has not read."""

    consumer_id: str
    next_snapshot: int
    updated_ms: int

    def to_bytes(self) -> bytes:
        return json.dumps(
            {"nextSnapshot": self.next_snapshot, "updatedMillis": self.updated_ms}
        ).encode()


def record_consumer(
    ctx: TableContext, consumer_id: str, next_snapshot: int, now_ms: int | None = None
) -> Consumer:
    """Record that ``consumer_id`` reads ``next_snapshot`` next (overwrites its position)."""
    check_identifier("consumer", consumer_id)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    consumer = Consumer(consumer_id, next_snapshot, now_ms)
    path = ctx.paths.consumer(consumer_id)
    ctx.io.ensure_parent(path)
    ctx.io.write_bytes(path, consumer.to_bytes())
    return consumer


def list_consumers(ctx: TableContext) -> list[Consumer]:
    """Every recorded consumer, by id."""
    out = []
    for info in ctx.io.list_dir(ctx.paths.consumer_dir):
        base = info.base_name
        data = ctx.io.try_read_bytes(info.path) if base.startswith("consumer-") else None
        if data is None:  # not a consumer's file, or deleted meanwhile
            continue
        d = json.loads(data)
        out.append(
            Consumer(base[len("consumer-") :], int(d["nextSnapshot"]), int(d["updatedMillis"]))
        )
    return sorted(out, key=lambda c: c.consumer_id)


def delete_consumer(ctx: TableContext, consumer_id: str) -> bool:
    """Forget a consumer (its stream is gone); whether it existed."""
    check_identifier("consumer", consumer_id)
    path = ctx.paths.consumer(consumer_id)
    if ctx.io.try_read_bytes(path) is None:
        return False
    ctx.io.delete_file(path)
    return True


def holding_floor(ctx: TableContext, now_ms: int) -> int | None:
    """The earliest snapshot a consumer still within ``consumer.expiration-time`` needs
    (None: none holds anything): the one before its next, the state a change read of the
    next one may compare with."""
    horizon = now_ms - ctx.options.consumer_expiration_ms
    needed = [max(c.next_snapshot - 1, 1) for c in list_consumers(ctx) if c.updated_ms >= horizon]
    return min(needed, default=None)


def drop_lapsed_consumers(ctx: TableContext, now_ms: int) -> list[str]:
    """Delete the files of consumers not updated for ``consumer.expiration-time``
    (they hold nothing any more); their ids."""
    horizon = now_ms - ctx.options.consumer_expiration_ms
    lapsed = [c.consumer_id for c in list_consumers(ctx) if c.updated_ms < horizon]
    for consumer_id in lapsed:
        ctx.io.delete_file(ctx.paths.consumer(consumer_id))
    return lapsed
