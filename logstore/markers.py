"""Barrier markers: keyless, valueless records carrying header ``dts.barrier``.

A marker goes to every partition of a table's topic. Besides the public header
``dts.barrier`` (the barrier id, ASCII decimal) our writer adds
``dts.txn-first-offset``: the offset of the first record this barrier's
transaction wrote to that partition, or -1 when it wrote none. Readers use it
to drop records of aborted transactions on brokers that do not filter them for
``read_committed`` (Tansu 0.6 does not); on Apache Kafka nothing is dropped
because aborted records never reach the reader. Plain Debezium consumers see
markers as tombstones and skip them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

BARRIER_HEADER = "dts.barrier"
TXN_FIRST_OFFSET_HEADER = "dts.txn-first-offset"

HeaderValue = str | bytes | None
Headers = Sequence[tuple[str, HeaderValue]] | Mapping[str, HeaderValue] | None


@dataclass(frozen=True)
class Marker:
    """A barrier marker as read from one partition."""

    partition: int
    offset: int
    barrier: int
    #: first offset of the barrier's transaction in this partition (-1: none; None: unknown)
    txn_first_offset: int | None = None


def marker_headers(barrier_id: int, txn_first_offset: int | None) -> list[tuple[str, HeaderValue]]:
    headers: list[tuple[str, HeaderValue]] = [(BARRIER_HEADER, str(barrier_id).encode("ascii"))]
    if txn_first_offset is not None:
        headers.append((TXN_FIRST_OFFSET_HEADER, str(txn_first_offset).encode("ascii")))
    return headers


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
    first: int | None = None
    items = headers.items() if isinstance(headers, Mapping) else headers
    for name, value in items:
        if name == BARRIER_HEADER:
            barrier = int(_as_bytes(value).decode("ascii"))
        elif name == TXN_FIRST_OFFSET_HEADER:
            first = int(_as_bytes(value).decode("ascii"))
    if barrier is None:
        return None
    return Marker(partition, offset, barrier, first)
