"""The worker's tables and their ownership: what the Faust app's hooks and the data
plane call into."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field
from typing import Protocol

from faust.types import TP

from bridge.worker.metrics import WorkerMetrics
from bridge.worker.stalls import STALL_AFTER_S, StallWatch
from bridge.worker.state.status import WorkerStatus
from bridge.worker.table_worker import TableWorker

log = logging.getLogger(__name__)


class Positioner(Protocol):
    """Where a table's records are fetched from (``bridge.worker.fetch.LogFetcher``)."""

    def new_epoch(self) -> int: ...

    def assign(self, topic: str, offsets: Mapping[int, int], epoch: int) -> None: ...

    def drop(self, topic: str, partitions: list[int] | None = None) -> None: ...


@dataclass
class TableSlot:
    """A table worker, the partitions Faust assigned to it here, and the locks that
    keep its data path and committer serial."""

    worker: TableWorker
    stalls: StallWatch
    wanted: list[int] = field(default_factory=list)
    data_lock: threading.Lock = field(default_factory=threading.Lock)
    commit_lock: threading.Lock = field(default_factory=threading.Lock)


class WorkerRuntime:
    def __init__(
        self,
        tables: list[TableWorker],
        metrics: WorkerMetrics,
        status: WorkerStatus,
        fetcher: Positioner,
        stall_after_s: float = STALL_AFTER_S,
    ) -> None:
        self.metrics = metrics
        self.status = status
        self.fetcher = fetcher
        self.stall_after_s = stall_after_s
        self.by_topic: dict[str, TableSlot] = {t.topic: self._slot(t) for t in tables}
        self._last_assignment: tuple[frozenset[TP], int] | None = None
        self._closing = False  # close() began: no new commit starts
        self._assign_lock = threading.Lock()
        # a newer rebalance waits to be applied (set by bridge.worker.ownership)
        self.superseded: Callable[[], bool] = lambda: False
        for t in tables:
            self._set_healthy(t, True)

    def add(self, table: TableWorker) -> TableSlot:
        """A table found after start; takes effect at the next rebalance."""
        slot = self._slot(table)
        # copy on write: other threads iterate the mapping without a lock
        self.by_topic = {**self.by_topic, table.topic: slot}
        self.status.tables[table.name] = table.status
        self._set_healthy(table, True)
        return slot

    def _slot(self, table: TableWorker) -> TableSlot:
        watch = StallWatch(table.status, self.metrics, stall_after_s=self.stall_after_s)
        return TableSlot(table, watch)

    @property
    def table_names(self) -> set[str]:
        return {slot.worker.name for slot in self.by_topic.values()}

    # -- ownership -------------------------------------------------------------------

    def on_assigned(self, assigned: Set[TP], generation: int) -> Mapping[TP, int]:
        """New assignment: (re)open owned buckets at their snapshot offsets and point the
        fetcher there; returns where each partition resumes. Stops half way when a newer
        change waits (``superseded``): that one reopens every table again.

        One call at a time (``bridge.worker.ownership`` makes the calls)."""
        with self._assign_lock:
            key = (frozenset(assigned), generation)
            if key == self._last_assignment:
                return {}  # Faust asks again for the same assignment: nothing moved
            self._last_assignment = key
            resume: dict[TP, int] = {}
            for topic, slot in list(self.by_topic.items()):
                if self.superseded():
                    self._last_assignment = None
                    break
                slot.wanted = sorted(tp.partition for tp in assigned if tp.topic == topic)
                offsets = self.reopen(slot)
                resume.update({TP(topic, p): o for p, o in offsets.items()})
            return resume

    def reopen(self, slot: TableSlot) -> dict[int, int]:
        """Drop the table's in-flight state and resume its wanted buckets from the latest
        snapshot (a rebalance, or recovery after an error). Errors mark it unhealthy."""
        tw = slot.worker
        try:
            with slot.data_lock:
                epoch = self.fetcher.new_epoch()
                offsets = tw.assign(slot.wanted, epoch)
                # posted under the lock, so the fetcher sees assignments in epoch order
                self.fetcher.assign(tw.topic, offsets, epoch)
        except Exception as exc:
            self.failed(slot, "data", exc)
            return {}
        # the data stage counts as working once a batch goes through again
        tw.status.health.retrying("data")
        if slot.wanted:
            log.info("table %s: buckets %s resume at %s", tw.name, slot.wanted, offsets)
        return offsets

    def on_revoked(self, revoked: Set[TP]) -> None:
        self._last_assignment = None
        for topic, slot in list(self.by_topic.items()):
            parts = [tp.partition for tp in revoked if tp.topic == topic]
            if parts:
                slot.wanted = [p for p in slot.wanted if p not in parts]
                # no more fetching at once; the lock waits for a batch under way
                self.fetcher.drop(topic, parts)
                with slot.data_lock:
                    slot.worker.revoke(parts)

    # -- health ----------------------------------------------------------------------

    def failed(self, slot: TableSlot, stage: str, exc: BaseException) -> None:
        """A table's data path or commit failed: count it, stop fetching it (data) and
        retry after a backoff; the other tables go on."""
        tw = slot.worker
        health = tw.status.health
        first = not health.is_failing(stage)
        backoff = health.failed(stage, exc)
        self.metrics.table_errors.labels(tw.name, self.metrics.job, stage).inc()
        self._set_healthy(tw, False)
        slot.stalls.failing(stage, exc, _positions(slot))
        if stage == "data":
            self.fetcher.drop(tw.topic)
        log.log(
            logging.ERROR if first else logging.WARNING,
            "table %s: %s failed (%s), retrying in %.2fs%s",
            tw.name,
            stage,
            health.last_error,
            backoff,
            " from the last snapshot" if stage == "data" else "",
        )

    def succeeded(self, slot: TableSlot, stage: str) -> None:
        health = slot.worker.status.health
        if not health.succeeded(stage):
            return
        log.warning("table %s: %s works again", slot.worker.name, stage)
        if health.healthy:
            self._set_healthy(slot.worker, True)
            slot.stalls.clear()

    def recover_due(self, highwater: Callable[[str, int], int | None]) -> None:
        """Reopen tables whose data path failed and whose backoff has passed; a reopened
        table with nothing left to fetch counts as working."""
        for slot in list(self.by_topic.values()):
            tw = slot.worker
            health = tw.status.health
            if health.due("data"):
                self.reopen(slot)
            elif health.is_failing("data") and not health.blocked("data"):
                ends = [highwater(tw.topic, b) for b in tw.buckets]
                if all(
                    end is not None and w.next_offset >= end - 1
                    for end, w in zip(ends, tw.buckets.values(), strict=True)
                ):
                    self.succeeded(slot, "data")
            elif health.healthy:
                owned = tw.status.buckets
                waiting = {b: bool(owned[b].lag_records) for b in tw.buckets if b in owned}
                slot.stalls.observe(_positions(slot), waiting)

    def _set_healthy(self, tw: TableWorker, healthy: bool) -> None:
        self.metrics.table_healthy.labels(tw.name, self.metrics.job).set(1 if healthy else 0)

    # -- committing ------------------------------------------------------------------

    def commit_ready(self) -> list[tuple[str, int]]:
        """Run every committer this worker holds (non-blocking if one is busy)."""
        done: list[tuple[str, int]] = []
        for slot in list(self.by_topic.values()):
            health = slot.worker.status.health
            if health.blocked("commit") and not health.due("commit"):
                continue
            if slot.worker.committer is None or not slot.commit_lock.acquire(blocking=False):
                continue
            try:
                if self._closing:  # checked under the lock close() waits for
                    break
                done += [(slot.worker.name, b) for b in slot.worker.commit_ready()]
            except Exception as exc:
                # e.g. a read-only or full warehouse, a prepared record replaced by a
                # bucket's new owner mid-read, a conflict: nothing was committed, retry
                self.failed(slot, "commit", exc)
            else:
                self.succeeded(slot, "commit")
            finally:
                slot.commit_lock.release()
        return done

    def committers_waiting(self) -> bool:
        """A committer here waits for buckets other workers prepare: poll them soon."""
        return any(
            c is not None and c.waiting
            for c in (s.worker.committer for s in self.by_topic.values())
        )

    def close(self, commit_wait_s: float = 10.0) -> None:
        """Stop committing, wait (bounded) for the commit under way, close every table.

        A commit left running while the process exits failed half way (the interpreter
        refused its storage client new threads) and logged an error after the worker
        said it stopped: harmless, as a snapshot appears whole or not at all and the next
        owner commits the barrier, but a slow store (S3) made it the usual ending."""
        self._closing = True
        for slot in list(self.by_topic.values()):
            committer = slot.worker.committer
            if committer is not None:
                committer.stopping = True  # a backlog is left to the next owner
        deadline = time.monotonic() + commit_wait_s
        for slot in list(self.by_topic.values()):
            if slot.commit_lock.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
                slot.commit_lock.release()
            else:
                log.warning("table %s: stopping with a commit still under way", slot.worker.name)
            with slot.data_lock:
                slot.worker.close()


def _positions(slot: TableSlot) -> dict[int, int]:
    """Partition -> the offset its bucket stands at (-1: not opened yet)."""
    buckets = slot.worker.buckets
    wanted = slot.wanted or sorted(buckets)
    return {p: (buckets[p].next_offset if p in buckets else -1) for p in wanted}
