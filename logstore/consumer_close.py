"""Closing Kafka consumers within a bound.

librdkafka's ``close()`` ends the consumer's group handle, which waits for the group
coordinator; when a coordinator query gets no answer it asks again for ever
(confluentinc/librdkafka#3740, open). A consumer whose positions are committed inside
the writer's Kafka transaction (the ingest's) has nothing left to commit on close, so a
stop must not wait on it: an operator's Ctrl-C would hang with every barrier already
committed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Protocol

log = logging.getLogger(__name__)

#: how long closing a stopping process's consumers may take; a close returns in well
#: under a second when the coordinator answers
CLOSE_S = 10.0


class Closeable(Protocol):
    def close(self) -> None: ...


def close_consumers(consumers: Mapping[str, Closeable], timeout_s: float = CLOSE_S) -> list[str]:
    """Close every consumer at once, each in its own thread; the names of those that
    did not close within ``timeout_s`` (each logged): their threads are left to finish,
    or to end with the process. The first error a close raised is raised.

    Only for consumers a close commits nothing for (``enable.auto.commit`` off, their
    positions committed elsewhere): one left closing may not have left its group yet."""
    failures: list[BaseException] = []
    threads = {}
    for name, consumer in consumers.items():

        def close(consumer: Closeable = consumer) -> None:
            try:
                consumer.close()
            except BaseException as exc:  # handed to the caller's thread
                failures.append(exc)

        threads[name] = threading.Thread(target=close, name=f"close-{name}", daemon=True)
        threads[name].start()
    end = time.monotonic() + timeout_s
    for thread in threads.values():
        thread.join(max(0.0, end - time.monotonic()))
    stuck = [name for name, thread in threads.items() if thread.is_alive()]
    for name in stuck:
        log.warning(
            "%s: the Kafka consumer did not close within %.0fs (its group coordinator did "
            "not answer); left to finish on its own: its positions are not committed by a close",
            name,
            timeout_s,
        )
    if failures:
        raise failures[0]
    return stuck


__all__ = ["CLOSE_S", "close_consumers"]
