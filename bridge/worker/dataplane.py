"""The worker's data plane: fetched batches into the table workers, in one thread.

The fetch thread (``bridge.worker.fetch``) fills a bounded queue; this thread takes
each batch, keeps the records its table worker admits (owned buckets, current
epoch, not yet consumed) and hands them over whole: decode, split at markers,
normalize, write and prepare are vectorized per batch. A table whose processing
fails stops being fetched, is retried after a backoff from its latest snapshot
(nothing buffered survives, nothing committed is redone twice), and the other
tables go on.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from bridge.worker.fetch import Fetched, LogFetcher
from bridge.worker.runtime import TableSlot, WorkerRuntime

log = logging.getLogger(__name__)


class DataPlane:
    def __init__(
        self,
        runtime: WorkerRuntime,
        fetcher: LogFetcher,
        on_prepared: Callable[[], None],
        on_fatal: Callable[[BaseException], None],
    ) -> None:
        self.runtime = runtime
        self.fetcher = fetcher
        self._on_prepared = on_prepared
        self._on_fatal = on_fatal
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.fetcher.start()
        self._thread = threading.Thread(target=self._run, name="dts-data-plane", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.fetcher.stop()

    def _run(self) -> None:
        metrics = self.runtime.metrics
        while not self._stop.is_set():
            if self.fetcher.error is not None:
                self._on_fatal(self.fetcher.error)
                return
            self.runtime.recover_due(self.fetcher.highwater)
            metrics.fetch_blocked.labels(metrics.job).set(1 if self.fetcher.blocked else 0)
            try:
                item = self.fetcher.out.get(timeout=0.2)
            except queue.Empty:
                continue
            slot = self.runtime.by_topic.get(item.topic)
            if slot is not None and self._process(slot, item):
                self._on_prepared()

    def _process(self, slot: TableSlot, item: Fetched) -> bool:
        """Apply one batch; True when it prepared at least one barrier."""
        tw = slot.worker
        with slot.data_lock:
            if tw.status.health.blocked("data"):
                return False  # dropped: the table is re-read from its snapshot on recovery
            records = tw.admit(item.records, item.epoch)
            if not len(records):
                return False
            try:
                prepared = tw.process(records)
            except Exception as exc:
                self.runtime.failed(slot, "data", exc)
                return False
        self.runtime.succeeded(slot, "data")
        return bool(prepared)
