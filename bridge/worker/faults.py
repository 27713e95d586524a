"""Crash points for fault-injection tests (inactive unless the environment asks).

``DTS_WORKER_CRASH_AT="<point>:<n>"`` makes the worker SIGKILL itself the n-th
time it reaches ``<point>``: ``batch`` (records decoded, nothing written),
``prepared`` (a bucket's prepared record published), ``committing`` (all
records of a barrier read, FileStore commit not yet done), ``committed``
(snapshot committed, prepared records not yet cleaned up).
"""

from __future__ import annotations

import os
import signal
import threading

ENV = "DTS_WORKER_CRASH_AT"


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


_points = CrashPoints(os.environ.get(ENV))


def reach(point: str) -> None:
    _points.reach(point)
