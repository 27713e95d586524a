"""What the `dts` streaming sink learns from Spark's checkpoint.

Barrier propagation: the sink commits, for micro-batch N, the barrier of the
`dts` source offset that batch ends at. Spark writes those end offsets to
`<checkpoint>/offsets/<N>` (line 1 "v1", line 2 batch metadata, then one JSON
line per source, "-" for none) before any task of batch N runs, and replays
the same file on restart, so reading it back is deterministic and also works
for micro-batches that carry no rows (an idle barrier still propagates).
With several `dts` sources (a join) the greatest barrier wins. A micro-batch that
ends inside a barrier (`maxOffsetsPerTrigger`) commits without one.

Idempotence: the commit user is `spark-<query id>`, the query id being the one
Spark keeps in `<checkpoint>/metadata` across restarts; the commit identifier
is the batch id.
"""

from __future__ import annotations

import json

import pyarrow.fs as pafs

from bridge.spark.errors import SinkBarrierError
from bridge.spark.stream.offsets import barrier_of, is_partial


def _fs_path(uri: str) -> tuple[pafs.FileSystem, str]:
    if "://" in uri:
        fs, path = pafs.FileSystem.from_uri(uri)
        return fs, str(path)
    return pafs.LocalFileSystem(), uri.removeprefix("file:")


def _read_text(uri: str) -> str | None:
    fs, path = _fs_path(uri)
    try:
        with fs.open_input_stream(path) as f:
            return bytes(f.read()).decode("utf-8")
    except FileNotFoundError:
        return None


def query_id(checkpoint: str) -> str:
    """The streaming query id Spark keeps in `<checkpoint>/metadata`."""
    text = _read_text(checkpoint.rstrip("/") + "/metadata")
    if text is None:
        raise SinkBarrierError(f"no Spark query metadata under checkpoint {checkpoint!r}")
    return str(json.loads(text)["id"])


def _dts_offsets(checkpoint: str, batch_id: int) -> list[dict[str, object]]:
    """The `dts` source offsets micro-batch `batch_id` ends at (Spark's offset log)."""
    text = _read_text(f"{checkpoint.rstrip('/')}/offsets/{batch_id}")
    if text is None:
        raise SinkBarrierError(
            f"Spark offset log for batch {batch_id} missing under {checkpoint!r}"
        )
    out = []
    for line in text.splitlines()[2:]:
        line = line.strip()
        if not line or line == "-":
            continue
        try:
            offset = json.loads(line)
        except json.JSONDecodeError:
            continue  # another source's non-JSON offset
        if isinstance(offset, dict) and offset.get("dts") is not None:
            out.append(offset)
    return out


def source_barrier(checkpoint: str, batch_id: int) -> int | None:
    """The barrier the `dts` sources of micro-batch `batch_id` end at (None: no `dts` source)."""
    barriers = [b for o in _dts_offsets(checkpoint, batch_id) if (b := barrier_of(o)) is not None]
    return max(barriers) if barriers else None


def ends_inside_barrier(checkpoint: str, batch_id: int) -> bool:
    """Whether a `dts` source of micro-batch `batch_id` ends inside a barrier (its commit
    then carries no barrier: it holds part of one)."""
    return any(is_partial(o) for o in _dts_offsets(checkpoint, batch_id))


def source_tables(checkpoint: str, batch_id: int) -> list[str]:
    """The `dts` tables micro-batch `batch_id` reads (the job's sources for the MetaService)."""
    names = [str(o["table"]) for o in _dts_offsets(checkpoint, batch_id) if o.get("table")]
    return sorted(set(names))
