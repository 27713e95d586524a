"""Crash points for fault-injection tests (inactive unless the environment asks).

``DTS_WORKER_CRASH_AT="<point>:<n>"`` makes the worker SIGKILL itself the n-th
time it reaches ``<point>``: ``batch`` (records decoded, nothing written),
``prepared`` (a bucket's prepared record published), ``committing`` (all
records of a barrier read, FileStore commit not yet done), ``committed``
(snapshot committed, prepared records not yet cleaned up), ``assigning`` (a table's
buckets being taken: old records discarded, resume point not yet read).

``DTS_WORKER_PAUSE_AT="<point>:<n>:<seconds>"`` makes it sleep that long the n-th time
instead, holding whatever it holds there (the table's data lock at ``batch`` and
``assigning``, as a slow store holds it), and log a line when the pause starts.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

ENV = "DTS_WORKER_CRASH_AT"
PAUSE_ENV = "DTS_WORKER_PAUSE_AT"

log = logging.getLogger(__name__)


class CrashPoints:
    def __init__(self, spec: str | None) -> None:
        self._point, self._left = None, 0
        if spec:
            point, _, n = spec.partition(":")
            self._point, self._left = point, int(n or 1)
        self._lock = threading.Lock()

    def reach(self, point: str) -> None:
        if point != self._point:
            return
        with self._lock:
            self._left -= 1
            if self._left <= 0:
                os.kill(os.getpid(), signal.SIGKILL)


class PausePoint:
    def __init__(self, spec: str | None) -> None:
        self._point, self._left, self._seconds = None, 0, 0.0
        if spec:
            point, n, seconds = spec.split(":")
            self._point, self._left, self._seconds = point, int(n), float(seconds)
        self._lock = threading.Lock()

    def reach(self, point: str) -> None:
        if point != self._point:
            return
        with self._lock:
            self._left -= 1
            pause = self._left == 0
        if pause:
            log.warning("fault injection: pausing %g s at %s", self._seconds, point)
            time.sleep(self._seconds)


_points = CrashPoints(os.environ.get(ENV))
_pauses = PausePoint(os.environ.get(PAUSE_ENV))


def reach(point: str) -> None:
    _points.reach(point)
    _pauses.reach(point)
