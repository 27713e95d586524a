"""Helpers of the Spark bridge tests: tiny tables and comparisons."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("k", pa.string()),
        pa.field("v", pa.float64()),
    ]
)


def rows(n: int, start: int = 0, k: str = "a") -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {"id": ids, "k": [k if i % 2 else f"{k}{i % 3}" for i in ids], "v": [i * 0.5 for i in ids]},
        schema=SCHEMA,
    )


def make_table(
    warehouse: Path, name: str = "db.t", *, pk: bool = True, buckets: int = 2, **kw: Any
) -> Any:
    from filestore import Catalog

    cat = Catalog(str(warehouse))
    db = name.split(".")[0]
    if db not in cat.list_databases():
        cat.create_database(db)
    return cat.create_table(
        name, SCHEMA, primary_key=["id"] if pk else None, options={"bucket": str(buckets), **kw}
    )


def commit(table: Any, data: pa.Table, barrier: int | None = None, user: str = "test") -> Any:
    w = table.new_write(user)
    w.write(data)
    return w.commit(barrier=barrier)


def sort(t: pa.Table, *cols: str) -> list[dict[str, Any]]:
    keys = list(cols) or ["id"]
    return sorted(t.to_pylist(), key=lambda r: tuple((r[c] is None, r[c]) for c in keys))


def spark_rows(df: Any) -> pa.Table:
    return df.toArrow()


def data_snapshots(t: Any) -> list[Any]:
    """Snapshots made by writers (auto-compaction may add COMPACT ones in between)."""
    return [s for s in t.snapshots() if s.commit_kind != "COMPACT"]


def barriers(t: Any) -> list[int]:
    """Distinct barriers of a table's snapshots, in commit order."""
    out: list[int] = []
    for s in t.snapshots():
        if s.barrier is not None and s.barrier not in out:
            out.append(s.barrier)
    return out


def stream_from_first_snapshot(
    spark: Any, warehouse: Path, table: str, *, one_barrier_per_batch: bool = False
) -> Any:
    """A streaming read of ``table``'s FileStore tier from its first snapshot; with
    ``one_barrier_per_batch`` every micro-batch completes exactly one barrier."""
    reader = (
        spark.readStream.format("dts")
        .option("warehouse", str(warehouse))
        .option("tier", "file")
        .option("scan.mode", "from-snapshot")
        .option("scan.snapshot-id", "1")
    )
    if one_barrier_per_batch:
        reader = reader.option("maxBarriersPerTrigger", "1")
    return reader.load(table)


def log_tier_reader(spark: Any, warehouse: Path, broker: Any, **opts: Any) -> Any:
    """`readStream.format("dts")` of the log tier through ``broker``, with ``opts``."""
    reader = (
        spark.readStream.format("dts")
        .option("warehouse", str(warehouse))
        .option("tier", "log")
        .option("bootstrap", broker.bootstrap)
    )
    for key, value in opts.items():
        reader = reader.option(key, str(value))
    return reader


def into_dts(df: Any, warehouse: Path, target: str, checkpoint: Path, timeout_s: int = 180) -> Any:
    """Run streaming ``df`` into the dts table ``target`` once (Trigger.AvailableNow,
    restartable from ``checkpoint``); the finished query."""
    q = (
        df.writeStream.format("dts")
        .option("warehouse", str(warehouse))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(target)
    )
    assert q.awaitTermination(timeout_s)
    assert q.exception() is None, q.exception()
    return q


def committed_ends(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 30.0
) -> dict[int, int]:
    """Per partition, the end a read_committed reader sees once the committed transactions'
    markers are in the log. Kafka answers a commit before it writes them, so the end asked
    right after `LogWriter.barrier()` can still be the transaction's first record: as a
    snapshot's log offsets it made a stream read that barrier again."""
    from bridge.spark.read.kafka_access import consumer
    from logstore.watermarks import watermarks

    committed = consumer(bootstrap, eof=False)
    raw = consumer(bootstrap, eof=False, isolation="read_uncommitted")
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            ends = {p: hi for p, (_lo, hi) in watermarks(committed, topic, partitions).items()}
            if ends == {p: hi for p, (_lo, hi) in watermarks(raw, topic, partitions).items()}:
                return ends
            assert time.monotonic() < deadline, f"{topic}: commit markers not in {timeout_s} s"
            time.sleep(0.02)  # a marker the coordinator is writing now
    finally:
        committed.close()
        raw.close()
