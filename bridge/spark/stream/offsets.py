"""Streaming offsets of the `dts` source: small, deterministic JSON.

Every offset is a flat dict with sorted keys, `"dts": 1` (format version, also
how the streaming sink recognizes a `dts` source in Spark's offset log) and
`"barrier"`: the barrier the micro-batch *ending* at this offset completes
(None before the first one); log and hybrid offsets add `"partial": true` when the
micro-batch ending there also holds part of a later barrier (maxOffsetsPerTrigger cut
it), so it completes no barrier exactly. Spark writes each batch's end offset to
`<checkpoint>/offsets/<batchId>` before running the batch; the `dts` sink reads
the barrier back from there (see `bridge.spark.write._checkpoint`).

- file tier:   {"dts":1,"tier":"file","table":T,"snapshot":S,"barrier":B,"full":bool}
               S = last snapshot consumed (0 = none); `full` on a start offset means
               "emit the end snapshot in full as +I" (scan.mode=latest-full).
- log tier:    {"dts":1,"tier":"log","table":T,"offsets":{"<partition>": next_offset},"barrier":B}
- hybrid tier: {"dts":1,"tier":"hybrid","table":T,"phase":"snapshot"|"log",
                "snapshot":S,"offsets":{...},"barrier":B}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bridge.spark.errors import OffsetFormatError

VERSION = 1


def _offsets_json(offsets: dict[int, int]) -> dict[str, int]:
    return {str(p): int(offsets[p]) for p in sorted(offsets)}


def _offsets_from(d: dict[str, Any] | None) -> dict[int, int]:
    return {int(p): int(o) for p, o in (d or {}).items()}


def _offset_json(
    tier: str, table: str, barrier: int | None, partial: bool = False, **fields: Any
) -> dict[str, Any]:
    """One tier's offset: the fields every tier has plus ``fields``, keys sorted."""
    d = {"barrier": barrier, "dts": VERSION, "table": table, "tier": tier, **fields}
    if partial:  # only then: offsets of whole barriers stay as they always were
        d["partial"] = True
    return dict(sorted(d.items()))


@dataclass(frozen=True)
class FileOffset:
    table: str
    snapshot: int
    barrier: int | None = None
    full: bool = False

    def to_json(self) -> dict[str, Any]:
        return _offset_json(
            "file", self.table, self.barrier, full=self.full, snapshot=self.snapshot
        )

    @staticmethod
    def from_json(d: dict[str, Any]) -> FileOffset:
        _check(d, "file")
        return FileOffset(
            d["table"], int(d["snapshot"]), d.get("barrier"), bool(d.get("full", False))
        )


@dataclass(frozen=True)
class LogOffset:
    table: str
    offsets: dict[int, int] = field(default_factory=dict)
    barrier: int | None = None
    partial: bool = False

    def to_json(self) -> dict[str, Any]:
        return _offset_json(
            "log", self.table, self.barrier, self.partial, offsets=_offsets_json(self.offsets)
        )

    @staticmethod
    def from_json(d: dict[str, Any]) -> LogOffset:
        _check(d, "log")
        return LogOffset(
            d["table"],
            _offsets_from(d.get("offsets")),
            d.get("barrier"),
            bool(d.get("partial", False)),
        )


@dataclass(frozen=True)
class HybridOffset:
    table: str
    phase: str  # "snapshot": nothing read yet; "log": snapshot emitted, now reading the log
    snapshot: int = 0
    offsets: dict[int, int] = field(default_factory=dict)
    barrier: int | None = None
    partial: bool = False

    def to_json(self) -> dict[str, Any]:
        return _offset_json(
            "hybrid",
            self.table,
            self.barrier,
            self.partial,
            offsets=_offsets_json(self.offsets),
            phase=self.phase,
            snapshot=self.snapshot,
        )

    @staticmethod
    def from_json(d: dict[str, Any]) -> HybridOffset:
        _check(d, "hybrid")
        return HybridOffset(
            d["table"],
            d["phase"],
            int(d.get("snapshot", 0)),
            _offsets_from(d.get("offsets")),
            d.get("barrier"),
            bool(d.get("partial", False)),
        )


def _check(d: dict[str, Any], tier: str) -> None:
    if d.get("dts") != VERSION or d.get("tier") != tier:
        raise OffsetFormatError(
            f"checkpointed offset {d!r} is not a dts {tier}-tier offset (version {VERSION}); "
            "was the query's tier or source changed? start a new checkpoint"
        )


def barrier_of(d: Any) -> int | None:
    """The barrier recorded in one source's offset, or None when it is not a `dts` offset."""
    if isinstance(d, dict) and d.get("dts") == VERSION and d.get("barrier") is not None:
        return int(d["barrier"])
    return None


def is_partial(d: Any) -> bool:
    """Whether one source's offset ends its micro-batch inside a barrier."""
    return isinstance(d, dict) and d.get("dts") == VERSION and bool(d.get("partial"))
