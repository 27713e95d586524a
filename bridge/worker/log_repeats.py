"""At most one line a minute per repeated Kafka client condition in the worker's log.

aiokafka (the client of Faust's group consumer and producer) logs every failed
connection, metadata update and coordinator lookup, at ERROR, several times a second
for as long as no broker answers: hours of noise for one condition, which buries the
lines that matter. The first line of each condition still shows; repeats within
``window_s`` are counted, and the next line shown says how many were not.
``bridge.worker.reachability`` says what the outage means for the worker.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable

#: the loggers aiokafka writes to
AIOKAFKA_LOGGERS = (
    "aiokafka",
    "aiokafka.conn",
    "aiokafka.cluster",
    "aiokafka.consumer.consumer",
    "aiokafka.consumer.fetcher",
    "aiokafka.consumer.group_coordinator",
    "aiokafka.producer.producer",
    "aiokafka.producer.sender",
)
WINDOW_S = 60.0
# what changes between repeats of one condition: node ids, ports, counters, durations
_VARYING = re.compile(r"\d+")


class RepeatLimiter(logging.Filter):
    """Lets a warning or error through once per ``window_s`` per (logger, message with
    its numbers left out); lower levels always pass."""

    def __init__(
        self, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.window_s = window_s
        self._clock = clock
        self._shown: dict[tuple[str, str], tuple[float, int]] = {}  # -> (shown at, hidden)
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        message = record.getMessage()
        key = (record.name, _VARYING.sub("#", message))
        now = self._clock()
        with self._lock:
            shown_at, hidden = self._shown.get(key, (None, 0))
            if shown_at is not None and now - shown_at < self.window_s:
                self._shown[key] = (shown_at, hidden + 1)
                return False
            self._shown[key] = (now, 0)
        if hidden:
            record.msg, record.args = (
                "%s (and %d more like it in %.0f s, not shown)",
                (
                    message,
                    hidden,
                    now - (shown_at or now),
                ),
            )
        return True


def limit_repeats(
    loggers: Iterable[str] = AIOKAFKA_LOGGERS, window_s: float = WINDOW_S
) -> RepeatLimiter:
    """Put one limiter on each of ``loggers`` (a logger's filters do not reach its
    children, so each is named); once per process."""
    limiter = RepeatLimiter(window_s)
    for name in loggers:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RepeatLimiter) for f in logger.filters):
            logger.addFilter(limiter)
    return limiter
