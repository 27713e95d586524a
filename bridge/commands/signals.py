"""SIGTERM as Ctrl-C for the long-running commands.

``docker stop`` and supervisors send SIGTERM, whose default action ends a process with
no stop line and no clean-up; raised as KeyboardInterrupt it takes the same way out as
Ctrl-C. Servers that install their own handlers later (uvicorn, Faust) replace this one
while they run.
"""

from __future__ import annotations

import contextlib
import signal
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
