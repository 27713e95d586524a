"""SIGTERM as Ctrl-C for the long-running commands, or both as one stop event.

``docker stop`` and supervisors send SIGTERM, whose default action ends a process with
no stop line and no clean-up; raised as KeyboardInterrupt it takes the same way out as
Ctrl-C. Servers that install their own handlers later (uvicorn, Faust) replace this one
while they run.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


def sigterm_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    previous = signal.signal(signal.SIGTERM, sigterm_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def stop_on_signal() -> Iterator[threading.Event]:
    """An event set by Ctrl-C or SIGTERM, for commands that watch what they started and
    stop it in order (their own handlers restored on the way out)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
