"""Barrier markers: keyless, valueless records carrying header ``dts.barrier``.

A marker goes to every partition of a table's topic; its one header
``dts.barrier`` holds the barrier id in ASCII decimal. Readers use
``read_committed``, so records of aborted transactions never reach them, and
every data record they see is applied (or sent to the DLQ with a reason),
whoever produced it. Plain Debezium consumers see markers as tombstones and
skip them.

A truncate (the source table emptied, Debezium's ``op: "t"``) is a record in
Debezium's own shape, ``{"before":null,"after":null,"op":"t"}``, written by the
LogWriter to every partition inside the barrier: rows of a partition before it
are gone, rows after it are the table's new content. Decoders report it as a
``Truncate`` at its partition and offset.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

BARRIER_HEADER = "dts.barrier"

HeaderValue = str | bytes | None
Headers = Sequence[tuple[str, HeaderValue]] | Mapping[str, HeaderValue] | None


@dataclass(frozen=True)
class Marker:
    """A barrier marker as read from one partition."""

    partition: int
    offset: int
    barrier: int


@dataclass(frozen=True)
class Truncate:
    """A truncate record as read from one partition: rows before it are removed."""

    partition: int
    offset: int


def next_barrier_id(last: int, now_ms: int | None = None) -> int:
    """The id of a new barrier after ``last``: epoch milliseconds, strictly increasing.

    Wall-clock ids let a reader tell a barrier's age from its id alone; ``last + 1``
    keeps them increasing when two barriers close within a millisecond or the clock
    steps back.
    """
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    return max(now, last + 1)


def marker_headers(barrier_id: int) -> list[tuple[str, HeaderValue]]:
    return [(BARRIER_HEADER, str(barrier_id).encode("ascii"))]


def _as_bytes(v: bytes | str | None) -> bytes:
    if v is None:
        return b""
    return v.encode() if isinstance(v, str) else bytes(v)


def parse_marker(partition: int, offset: int, headers: Headers) -> Marker | None:
    """The marker carried by a valueless record's headers, or None if it is a plain tombstone.

    Raises ValueError when ``dts.barrier`` is present but not an integer.
    """
    if not headers:
        return None
    barrier: int | None = None
    items = headers.items() if isinstance(headers, Mapping) else headers
    for name, value in items:
        if name == BARRIER_HEADER:
            barrier = int(_as_bytes(value).decode("ascii"))
    if barrier is None:
        return None
    return Marker(partition, offset, barrier)
