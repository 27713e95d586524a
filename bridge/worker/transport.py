"""Faust's aiokafka transport, reduced to group coordination for the worker.

Faust's consumer keeps the group membership, the partition assignment and the
rebalance callbacks, but never fetches table data: every partition it is
assigned is paused at once, so its fetcher sends no fetch requests, and its
poll loop idles inside aiokafka's fetch context (which keeps
``max.poll.interval`` satisfied). Records are fetched in bulk by
``bridge.worker.fetch.LogFetcher`` instead. After each rebalance Faust calls
``perform_seek``; the worker then positions its bulk fetcher where each table's
latest snapshot says its buckets resume (the ``resume_hook``, applied off the event
loop by ``bridge.worker.ownership``).

With every broker down, aiokafka's fetcher asks for a metadata update whenever an
assigned partition has no known leader, paused ones included, and a failed update
answers at once: ~5000 updates a second, a core and two ERROR lines each, for as long
as the outage lasted. The group consumer's failed updates are paced
(``pace_metadata_updates``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Set
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

# called with the assigned partitions and the consumer generation; must not block
ResumeHook = Callable[[Set[TP], int], object]

# longest idle wait of Faust's poll loop: short, so rebalances are not held up
_IDLE_POLL_S = 0.2
# how long the group consumer may take to close when the worker stops
CONSUMER_CLOSE_S = 5.0
# how long a failed metadata update of the group consumer waits before its waiters hear
# of it (and may ask again)
METADATA_RETRY_S = 0.5

log = logging.getLogger(__name__)


async def finish_within(step: Awaitable[None], timeout_s: float, what: str) -> bool:
    """Await ``step`` for at most ``timeout_s``; past it, cancel it and warn. True if it
    finished.

    A step that ends cancelled from inside is given up the same way: aiokafka's fetcher
    cancels a fetch that is backing off after a lost connection and re-raises that
    cancellation from ``consumer.stop()``, which escaped the consumer's thread as a
    traceback. Cancelling the task that awaits ``step`` still cancels it."""
    try:
        await asyncio.wait_for(step, timeout_s)
    except TimeoutError:
        log.warning("stopping: %s did not finish within %g s; going on without it", what, timeout_s)
        return False
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
        log.warning("stopping: %s was cancelled from inside; going on without it", what)
        return False
    return True


def pace_metadata_updates(client: Any, retry_s: float = METADATA_RETRY_S) -> None:
    """Make an aiokafka client's failed metadata updates take ``retry_s``.

    Its metadata task runs one update per request and hands the result to every waiter;
    a failure (no broker answered) came back at once, and the fetcher asked again at
    once. Updates that succeed, including those a live broker answers while another is
    down, are not delayed."""
    update = client._metadata_update

    async def paced(cluster: Any, topics: Any) -> bool:
        ok = bool(await update(cluster, topics))
        if not ok:
            await asyncio.sleep(retry_s)
        return ok

    client._metadata_update = paced


class DtsConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    # mode waits this long for the thread to stop before going on with an error logged
    # (its default, 60 s, outlasts a supervisor's patience); on_thread_stop bounds the
    # known cause well within it
    shutdown_timeout = 15.0

    async def on_thread_stop(self) -> None:
        # Closing the consumer while a group join is in flight could wait for good: the
        # join's leader waited for a metadata update that the closing client never
        # delivered, and mode waited 60 s for the thread before giving up with a traceback.
        # Nothing is lost by not closing it cleanly: the worker's state is in the FileStore,
        # and the group drops this member after its session timeout.
        await finish_within(
            super().on_thread_stop(), CONSUMER_CLOSE_S, "closing the group consumer"
        )

    def verify_event_path(self, now: float, tp: TP) -> None:
        # Faust's livelock check expects this consumer to fetch every assigned partition
        # and logged an ERROR per partition every few seconds once a worker had run 5
        # minutes ("Aiokafka has not sent fetch request ... since start"): here the
        # partitions are paused on purpose. The worker's own stall check
        # (bridge.worker.stalls) watches the fetcher that does read them.
        return None

    def _create_consumer(self, loop: asyncio.AbstractEventLoop) -> Any:
        consumer = super()._create_consumer(loop)
        pace_metadata_updates(consumer._client)
        return consumer

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
        """Hand the current assignment to the worker (the ``resume_hook``), which applies
        it in its own thread (``bridge.worker.ownership``): Faust waits for a seek only
        so long before its recovery service gives up for good."""
        hook: ResumeHook | None = getattr(self.app, "resume_hook", None)
        if hook is None:
            await super().perform_seek()
            return
        hook(set(self.assignment()), int(self.app.consumer_generation_id or 0))


class DtsTransport(faust_aiokafka.Transport):
    Consumer = DtsConsumer
