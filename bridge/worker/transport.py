"""Faust's aiokafka transport, adjusted for the worker's exactly-once protocol.

Two changes, both at the only place Faust decides them:

- consumers read with ``isolation.level=read_committed`` (Faust only does so
  with its own ``exactly_once`` guarantee, which would also make it
  transactional), so a transactional table's barrier is seen whole or not at all;
- after a rebalance each assigned partition is positioned where the table's
  latest snapshot says its bucket resumes, not at the consumer group's committed
  offset. Faust calls ``perform_seek`` while the flow is stopped and before it
  fetches again, so nothing from the old position reaches the agents (aiokafka
  drops prefetched records whose position changed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from typing import Any

from aiokafka.errors import IllegalStateError
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

# called with the assigned partitions and the consumer generation; returns where to seek
ResumeHook = Callable[[Set[TP], int], Mapping[TP, int]]


class DtsConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # aiokafka reads this attribute when it builds its fetcher in start()
        consumer._isolation_level = "read_committed"
        return consumer


class DtsConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> DtsConsumerThread:
        return DtsConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def perform_seek(self) -> None:
        await super().perform_seek()
        hook: ResumeHook | None = getattr(self.app, "resume_hook", None)
        if hook is None:
            return
        assigned = self.assignment()
        offsets = hook(assigned, int(self.app.consumer_generation_id or 0))
        for tp, offset in offsets.items():
            try:
                await self.seek(tp, offset)
            except IllegalStateError:
                # revoked by a rebalance that started meanwhile; the next assignment seeks again
                self.log.info("partition %r revoked before seeking to %d", tp, offset)


class DtsTransport(faust_aiokafka.Transport):
    Consumer = DtsConsumer
