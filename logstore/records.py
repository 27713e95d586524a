"""Kafka records as parallel columns: what a bulk fetch hands to the decoder.

A consume() batch of confluent-kafka messages becomes one ``LogRecords`` (one list or
array per field, built by a comprehension each), so everything after the fetch works
on whole columns: selecting a bucket's records, finding the last offset of each
partition and decoding the values are numpy/Arrow operations, not Python per record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from logstore.codec import Decoded, RawRecord, UnknownColumns, decode_columns
from logstore.spec import LogSpec

Headers = Any  # list[tuple[str, bytes | None]] | None, as the Kafka client gives it


@dataclass(frozen=True)
class LogRecords:
    """Records of one topic, in fetch order (offsets increase within a partition)."""

    partitions: np.ndarray  # int32
    offsets: np.ndarray  # int64
    keys: Sequence[bytes | None]
    values: Sequence[bytes | None]
    headers: Sequence[Headers]
    timestamps_ms: np.ndarray  # int64; -1 where the broker gave none

    def __len__(self) -> int:
        return len(self.offsets)

    @classmethod
    def empty(cls) -> LogRecords:
        return cls(np.empty(0, np.int32), np.empty(0, np.int64), [], [], [], np.empty(0, np.int64))

    @classmethod
    def from_messages(cls, msgs: Sequence[Any]) -> LogRecords:
        """From confluent-kafka ``Message`` objects without errors (one topic)."""
        return cls(
            np.fromiter((m.partition() for m in msgs), np.int32, len(msgs)),
            np.fromiter((m.offset() for m in msgs), np.int64, len(msgs)),
            [m.key() for m in msgs],
            [m.value() for m in msgs],
            [m.headers() for m in msgs],
            np.fromiter((m.timestamp()[1] for m in msgs), np.int64, len(msgs)),
        )

    @classmethod
    def from_raw(cls, records: Sequence[RawRecord | tuple[Any, ...]]) -> LogRecords:
        """From ``(partition, offset, key, value, headers[, timestamp_ms])`` tuples."""
        if not records:
            return cls.empty()
        cols = list(zip(*records, strict=False))
        ts = cols[5] if len(cols) > 5 else [None] * len(records)
        return cls(
            np.asarray(cols[0], np.int32),
            np.asarray(cols[1], np.int64),
            list(cols[2]),
            list(cols[3]),
            list(cols[4]),
            np.asarray([-1 if t is None else t for t in ts], np.int64),
        )

    def take(self, idx: np.ndarray) -> LogRecords:
        """The records at positions ``idx`` (ascending)."""
        if len(idx) == len(self):
            return self
        pick = idx.tolist()
        return LogRecords(
            self.partitions[idx],
            self.offsets[idx],
            [self.keys[i] for i in pick],
            [self.values[i] for i in pick],
            [self.headers[i] for i in pick],
            self.timestamps_ms[idx],
        )

    def last_per_partition(self) -> dict[int, tuple[int, int | None]]:
        """partition -> (greatest offset, that record's timestamp or None)."""
        if not len(self):
            return {}
        out: dict[int, tuple[int, int | None]] = {}
        for p in np.unique(self.partitions).tolist():
            where = np.flatnonzero(self.partitions == p)
            i = where[np.argmax(self.offsets[where])]
            ts = int(self.timestamps_ms[i])
            out[p] = (int(self.offsets[i]), ts if ts >= 0 else None)
        return out


def decode_log_records(
    records: LogRecords,
    spec: LogSpec,
    lenient: bool = False,
    unknown_columns: UnknownColumns = "raise",
) -> Decoded:
    """Decode a fetched batch (the columnar form of ``codec.decode_records``)."""
    return decode_columns(
        spec,
        records.partitions.tolist(),
        records.offsets.tolist(),
        records.keys,
        records.values,
        records.headers,
        lenient=lenient,
        unknown_columns=unknown_columns,
    )
