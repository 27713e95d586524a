"""Faust's aiokafka transport, reduced to group coordination for the worker.

Faust's consumer keeps the group membership, the partition assignment and the
rebalance callbacks, but never fetches table data: every partition it is
assigned is paused at once, so its fetcher sends no fetch requests, and its
poll loop idles inside aiokafka's fetch context (which keeps
``max.poll.interval`` satisfied). Records are fetched in bulk by
``bridge.worker.fetch.LogFetcher`` instead. After each rebalance Faust calls
``perform_seek``; the worker then positions its bulk fetcher where each table's
latest snapshot says its buckets resume (the ``resume_hook``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Set
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

# called with the assigned partitions and the consumer generation; returns where they resume
ResumeHook = Callable[[Set[TP], int], Mapping[TP, int]]

# longest idle wait of Faust's poll loop: short, so rebalances are not held up
_IDLE_POLL_S = 0.2
# how long a rebalance callback may still run once the worker is stopping
STOPPING_CALLBACK_S = 5.0

log = logging.getLogger(__name__)


async def unless_stopping(
    callback: Awaitable[None], stopping: Awaitable[Any], grace_s: float, what: str
) -> None:
    """Await ``callback`` unless ``stopping`` completes first and the callback does not
    finish within ``grace_s`` after it; then it is cancelled and a warning says so."""
    task = asyncio.ensure_future(callback)
    stop = asyncio.ensure_future(stopping)
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            await asyncio.wait({task}, timeout=grace_s)
        if not task.done():
            task.cancel()
            log.warning("stopping: gave up waiting %g s for the worker to take %s", grace_s, what)
            return
        task.result()
    finally:
        stop.cancel()


class DtsConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    # A group join in flight when the worker is told to stop still completes in this
    # thread, and its callback into the stopping app may never return (the app's services
    # are stopping); the consumer's close waited for it until mode's 60 s shutdown timeout.
    async def on_partitions_assigned(self, assigned: set[TP], generation_id: int = 0) -> None:
        await unless_stopping(
            super().on_partitions_assigned(assigned, generation_id),
            self._stopped.wait(),
            STOPPING_CALLBACK_S,
            f"partitions {sorted(assigned)}",
        )

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        await unless_stopping(
            super().on_partitions_revoked(revoked),
            self._stopped.wait(),
            STOPPING_CALLBACK_S,
            f"the revocation of partitions {sorted(revoked)}",
        )

    async def _fetch_records(
        self,
        consumer: Any,
        active_partitions: Set[TP],
        timeout: float | None = None,
        max_records: int | None = None,
    ) -> Any:
        unpaused = consumer.assignment() - consumer.paused()
        if unpaused:
            consumer.pause(*unpaused)
        with consumer._fetcher._subscriptions.fetch_context():
            await asyncio.sleep(min(timeout or 0.0, _IDLE_POLL_S))
        return {}


class DtsConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> DtsConsumerThread:
        return DtsConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def perform_seek(self) -> None:
        hook: ResumeHook | None = getattr(self.app, "resume_hook", None)
        if hook is None:
            await super().perform_seek()
            return
        # reads each table's latest snapshot: off the event loop
        await asyncio.to_thread(
            hook, set(self.assignment()), int(self.app.consumer_generation_id or 0)
        )


class DtsTransport(faust_aiokafka.Transport):
    Consumer = DtsConsumer
