"""A PostgreSQL truncate (Debezium ``op: "t"``) in the middle of a barrier, end to end
(issue 24): `dts ingest` -> the table's log -> `dts worker` -> FileStore, real broker."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from bridge.tables import bucketer_for, log_spec_for
from logstore.gate import DataBatch, Truncated
from logstore.ingest import Ingestor
from logstore.reader import LogReader
from logstore.topics import create_topic
from tests.bridge.worker.support import create_table, latest_barrier, start_worker, wait_for

pytestmark = pytest.mark.kafka

PG_SOURCE = {"connector": "postgresql", "db": "shop", "schema": "public", "table": "items"}


def _row_event(op: str, i: int, v: str) -> bytes:
    after = {"id": i, "v": v, "n": i * 10}
    return orjson.dumps(
        {
            "schema": {"type": "struct", "name": "pg.public.items.Envelope"},
            "payload": {"before": None, "after": after, "source": PG_SOURCE, "op": op},
        }
    )


# Debezium's truncate event: no before/after at all, no key
TRUNCATE = orjson.dumps(
    {
        "schema": {"type": "struct", "name": "pg.public.items.Envelope"},
        "payload": {"source": PG_SOURCE, "op": "t", "ts_ms": 1732460000000, "transaction": None},
    }
)


def _produce(bootstrap: str, topic: str, values: list[tuple[int | None, bytes]]) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for key, value in values:
        p.produce(topic, value, None if key is None else orjson.dumps({"id": key}), 0)
    p.flush(10)


def _ingest(bootstrap: str, source: str, table, interval_s: float) -> int:  # type: ignore[no-untyped-def]
    ing = Ingestor(
        bootstrap,
        source,
        log_spec_for(table),
        bucketer_for(table),
        group_id=f"g-{source}",
        barrier_interval_s=interval_s,
    )
    try:
        stats = ing.run(idle_exit_s=2)
    finally:
        ing.close()
    assert stats.last_barrier is not None
    return stats.last_barrier


def test_truncate_mid_barrier_empties_the_table_in_that_barriers_snapshot(  # type: ignore[no-untyped-def]
    broker, warehouse: Path, tmp_path: Path
) -> None:
    table = create_table(warehouse, buckets=2)
    source = f"pg.public.items.{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, source, 1, {})
    _produce(broker.bootstrap, source, [(i, _row_event("r", i, "old")) for i in range(1, 6)])
    first = _ingest(broker.bootstrap, source, table, interval_s=0.2)
    # one barrier: a row the truncate removes, the truncate, then the table's new rows
    _produce(
        broker.bootstrap,
        source,
        [
            (6, _row_event("c", 6, "gone")),
            (None, TRUNCATE),
            (7, _row_event("c", 7, "new")),
            (3, _row_event("c", 3, "again")),
        ],
    )
    second = _ingest(broker.bootstrap, source, table, interval_s=60)

    # readers of the log see the truncate in its place, on every partition
    seen: list[tuple[str, int, list[int]]] = []
    spec = log_spec_for(table)
    with LogReader(
        broker.bootstrap, spec, until_barrier=second, idle_timeout_s=20, normalize=False
    ) as r:
        for ev in r:
            if isinstance(ev, Truncated):
                seen.append(("truncate", ev.partition, []))
            elif isinstance(ev, DataBatch):
                t = ev.table
                if t.column("_barrier")[0].as_py() == second:
                    p = t.column("_partition")[0].as_py()
                    seen.append(("rows", p, t.column("id").to_pylist()))
    by_partition = {p: [(k, ids) for k, q, ids in seen if q == p] for p in (0, 1)}
    assert all(("truncate", []) in events for events in by_partition.values())
    flat = [i for k, _, ids in seen for i in ids]
    assert sorted(flat) == [3, 6, 7]
    for events in by_partition.values():  # 6 before its partition's truncate, 3 and 7 after
        cut = events.index(("truncate", []))
        assert all(i == 6 for _, ids in events[:cut] for i in ids)
        assert all(i != 6 for _, ids in events[cut:] for i in ids)

    worker = start_worker(
        warehouse, broker.bootstrap, [table.name], f"g-{uuid.uuid4().hex[:8]}", tmp_path
    )
    try:
        wait_for(lambda: latest_barrier(table) == second, 60, "the truncate's barrier", worker)
    finally:
        worker.stop()
    before = table.snapshot_at_barrier(first)
    after = table.snapshot_at_barrier(second)
    assert before is not None and after is not None
    assert sorted(r["id"] for r in table.read(snapshot_id=before.id).to_pylist()) == [1, 2, 3, 4, 5]
    assert sorted((r["id"], r["v"]) for r in table.read().to_pylist()) == [(3, "again"), (7, "new")]
    assert after.commit_kind == "OVERWRITE"  # one snapshot: emptied and refilled
    # readers of the changelog see every removed row as -D (6 was never visible)
    changes = sorted(
        (r["_row_kind"], r["id"]) for r in table.changes(before.id, after.id).to_pylist()
    )
    assert changes == sorted(
        [("-D", 1), ("-D", 2), ("-D", 4), ("-D", 5), ("-U", 3), ("+U", 3), ("+I", 7)]
    )
