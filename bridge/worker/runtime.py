"""The worker's tables and their ownership: what the Faust app's hooks call into."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Set
from dataclasses import dataclass, field

from faust.types import TP

from bridge.worker.metrics import WorkerMetrics
from bridge.worker.state.status import WorkerStatus
from bridge.worker.table_worker import TableWorker

log = logging.getLogger(__name__)


@dataclass
class TableSlot:
    """A table worker plus the locks that keep its data path and committer serial."""

    worker: TableWorker
    data_lock: threading.Lock = field(default_factory=threading.Lock)
    commit_lock: threading.Lock = field(default_factory=threading.Lock)


class WorkerRuntime:
    def __init__(
        self, tables: list[TableWorker], metrics: WorkerMetrics, status: WorkerStatus
    ) -> None:
        self.metrics = metrics
        self.status = status
        self.by_topic: dict[str, TableSlot] = {t.topic: TableSlot(t) for t in tables}

    def add(self, table: TableWorker) -> TableSlot:
        """A table found after start; takes effect at the next rebalance."""
        slot = TableSlot(table)
        # copy on write: other threads iterate the mapping without a lock
        self.by_topic = {**self.by_topic, table.topic: slot}
        self.status.tables[table.name] = table.status
        return slot

    @property
    def table_names(self) -> set[str]:
        return {slot.worker.name for slot in self.by_topic.values()}

    def on_assigned(self, assigned: Set[TP], generation: int) -> Mapping[TP, int]:
        """New assignment: (re)open owned buckets; returns where each partition resumes."""
        resume: dict[TP, int] = {}
        for topic, slot in list(self.by_topic.items()):
            parts = sorted(tp.partition for tp in assigned if tp.topic == topic)
            with slot.data_lock:
                offsets = slot.worker.assign(parts, generation)
            for tp in assigned:
                if tp.topic == topic:
                    resume[tp] = offsets[tp.partition]
            if parts:
                log.info("table %s: buckets %s resume at %s", slot.worker.name, parts, offsets)
        return resume

    def on_revoked(self, revoked: Set[TP]) -> None:
        for topic, slot in list(self.by_topic.items()):
            parts = [tp.partition for tp in revoked if tp.topic == topic]
            if parts:
                with slot.data_lock:
                    slot.worker.revoke(parts)

    def commit_ready(self) -> list[tuple[str, int]]:
        """Run every committer this worker holds (non-blocking if one is busy)."""
        done: list[tuple[str, int]] = []
        for slot in list(self.by_topic.values()):
            if slot.worker.committer is None or not slot.commit_lock.acquire(blocking=False):
                continue
            try:
                done += [(slot.worker.name, b) for b in slot.worker.commit_ready()]
            except Exception as exc:
                # e.g. a prepared record replaced or removed by a bucket's new owner
                # mid-read, or a commit conflict: nothing was committed, retry next tick
                log.warning("table %s: commit failed, retrying: %r", slot.worker.name, exc)
            finally:
                slot.commit_lock.release()
        return done

    def close(self) -> None:
        for slot in list(self.by_topic.values()):
            with slot.data_lock:
                slot.worker.close()
