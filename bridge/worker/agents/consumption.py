"""The agent that consumes one table's log: raw records in, prepared barriers out.

Faust hands over one event per record (that Python loop is Faust's, and ours
only picks fields); decoding, cutting at markers and writing run vectorized
over the batch in a thread, so the event loop keeps fetching and heartbeating.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import faust

from bridge.worker.config import WorkerConfig
from bridge.worker.runtime import TableSlot
from bridge.worker.table_worker import RawRecord


def _process(slot: TableSlot, raw: list[RawRecord]) -> int:
    with slot.data_lock:
        return len(slot.worker.process(raw))


def attach_consumption_agent(
    app: faust.App, slot: TableSlot, config: WorkerConfig, on_prepared: Callable[[], Any]
) -> Any:
    """Register the table's agent on ``app``; ``on_prepared`` runs after a batch
    closed at least one barrier (lets the local committer react at once). Returns the
    agent (started by the app, or by the caller when added to a running app)."""
    worker = slot.worker
    topic = app.topic(
        worker.topic,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        allow_empty=True,  # barrier markers have neither key nor value
    )

    async def consume(stream: faust.StreamT) -> AsyncIterator[None]:
        # take_events (Faust >= 0.11) is missing from StreamT's stubs
        batches = stream.take_events(config.batch_size, within=config.batch_window_s)  # type: ignore[attr-defined]
        async for events in batches:
            accepts = worker.accepts
            raw: list[RawRecord] = [
                (m.partition, m.offset, m.key, m.value, m.headers, int(m.timestamp * 1000))
                for m in (e.message for e in events)
                if accepts(m.partition, m.offset, m.generation_id)
            ]
            if raw:
                closed = await asyncio.to_thread(_process, slot, raw)
                if closed:
                    await on_prepared()
            yield None

    return app.agent(topic, name=f"dts-consume.{worker.name}", concurrency=1, sink=None)(consume)
