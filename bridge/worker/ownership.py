"""Faust's rebalance callbacks, applied off its event loop, in order, latest assignment wins.

Taking or giving up buckets waits for each table's data lock, which a batch being
written holds for as long as the batch takes: seconds on S3, where every barrier a
catching-up bucket prepares is several requests. Done inside Faust's callbacks that
wait had two bad endings:

- Faust gives a seek ``broker_request_timeout`` (10 s); past it, its recovery service
  stops for good (``ServiceStopped``), and every later rebalance left the worker with no
  bucket at all while its group thought it had some;
- a revocation held the event loop (and the heartbeats of its web server, timers and
  MetaService link) until the batch ended.

So the callbacks only post what happened; one thread applies it. Revocations are
applied in order; of several assignments waiting, only the latest is (Faust also seeks
again and again while a rebalance is under way, with the assignment before it or an
empty one, and a stale one applied last left buckets unowned).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Set
from dataclasses import dataclass
from typing import Protocol

from faust.types import TP

log = logging.getLogger(__name__)


class Owner(Protocol):
    """What applies the changes (``bridge.worker.runtime.WorkerRuntime``)."""

    def on_assigned(self, assigned: Set[TP], generation: int) -> object: ...

    def on_revoked(self, revoked: Set[TP]) -> None: ...


@dataclass(frozen=True)
class _Assigned:
    partitions: frozenset[TP]
    generation: int


@dataclass(frozen=True)
class _Revoked:
    partitions: frozenset[TP]


class OwnershipQueue:
    def __init__(self, owner: Owner) -> None:
        self.owner = owner
        self._pending: deque[_Assigned | _Revoked] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- from Faust's callbacks (the event loop): never block --------------------------

    def assigned(self, partitions: Set[TP], generation: int) -> None:
        with self._lock:
            # a waiting assignment is superseded: only the newest one matters
            kept = [op for op in self._pending if not isinstance(op, _Assigned)]
            self._pending = deque(kept)
            self._pending.append(_Assigned(frozenset(partitions), generation))
            self._idle.clear()
        self._wake.set()

    def revoked(self, partitions: Set[TP]) -> None:
        with self._lock:
            self._pending.append(_Revoked(frozenset(partitions)))
            self._idle.clear()
        self._wake.set()

    # -- the thread ----------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dts-ownership", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def wait_idle(self, timeout_s: float) -> bool:
        """Everything posted so far has been applied (tests)."""
        return self._idle.wait(timeout_s)

    def superseded(self) -> bool:
        """A newer change waits: an assignment being applied may stop half way (the
        next one applies every table again)."""
        with self._lock:
            return bool(self._pending)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(0.5)
            self._wake.clear()
            while not self._stop.is_set():
                with self._lock:
                    if not self._pending:
                        self._idle.set()
                        break
                    op = self._pending.popleft()
                try:
                    if isinstance(op, _Revoked):
                        self.owner.on_revoked(op.partitions)
                    else:
                        self.owner.on_assigned(op.partitions, op.generation)
                except Exception:  # one table's failure is handled inside; this is a bug
                    log.exception("applying a rebalance failed; the next one retries")
