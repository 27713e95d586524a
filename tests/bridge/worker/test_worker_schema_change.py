"""A column added in the source mid-stream (issue 24), end to end through a real broker:
without --evolve-schema `dts ingest` stops at it, never dropping it; with it the table
gains the column and a running worker picks it up."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer, TopicPartition

from bridge.cli import cli
from logstore.topics import create_topic
from tests.bridge.worker.support import create_table, latest_barrier, start_worker, wait_for

pytestmark = pytest.mark.kafka

_BASE = [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "v"},
    {"type": "int64", "optional": True, "field": "n"},
]
_QTY = {"type": "int32", "optional": True, "field": "qty"}


def _event(op: str, i: int, v: str, qty: int | None = None, with_qty: bool = False) -> bytes:
    fields = [*_BASE, _QTY] if with_qty else _BASE
    image = {"type": "struct", "optional": True, "fields": fields}
    after = {"id": i, "v": v, "n": i, **({"qty": qty} if with_qty else {})}
    schema = {
        "type": "struct",
        "name": "mysql.shop.items.Envelope",
        "fields": [
            {**image, "field": "before"},
            {**image, "field": "after"},
            {"type": "string", "optional": False, "field": "op"},
        ],
    }
    payload = {"before": None, "after": after, "op": op, "source": {"connector": "mysql"}}
    return orjson.dumps({"schema": schema, "payload": payload})


def _produce(bootstrap: str, topic: str, values: list[tuple[int, bytes]]) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for key, value in values:
        p.produce(topic, value, orjson.dumps({"id": key}), 0)
    p.flush(10)


def _committed(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return int(c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset)
    finally:
        c.close()


def test_new_source_column_stops_ingest_or_evolves_the_table_and_worker(  # type: ignore[no-untyped-def]
    broker, warehouse: Path, tmp_path: Path
) -> None:
    table = create_table(warehouse, buckets=2)
    source = f"mysql.shop.items.{uuid.uuid4().hex[:6]}"
    group = f"ingest-{source}"
    create_topic(broker.bootstrap, source, 1, {})
    _produce(broker.bootstrap, source, [(1, _event("r", 1, "a")), (2, _event("r", 2, "b"))])
    args = ["ingest", "--from-topic", source, "--table", table.name, "--warehouse"]
    args += [str(warehouse), "--bootstrap", broker.bootstrap, "--group", group]
    args += ["--idle-exit", "2", "--barrier-interval", "0.2"]
    first = CliRunner().invoke(cli, args)
    assert first.exit_code == 0, first.output

    worker = start_worker(
        warehouse, broker.bootstrap, [table.name], f"g-{uuid.uuid4().hex[:8]}", tmp_path
    )
    try:
        wait_for(lambda: latest_barrier(table) is not None, 60, "the first barrier", worker)
        # ALTER TABLE items ADD COLUMN qty INT: the next events carry it
        _produce(
            broker.bootstrap,
            source,
            [(3, _event("c", 3, "c", 5, with_qty=True)), (1, _event("u", 1, "a2", 7, True))],
        )
        stopped = CliRunner().invoke(cli, args)
        assert stopped.exit_code == 1
        assert f"bad record at {source}[0]@2" in stopped.output
        assert "qty (int32)" in stopped.output and "--evolve-schema" in stopped.output
        assert "qty" not in table.schema.arrow_schema.names
        assert _committed(broker.bootstrap, group, source) == 2  # stopped at the new column

        evolved = CliRunner().invoke(cli, [*args, "--evolve-schema"])
        assert evolved.exit_code == 0, evolved.output
        assert "added qty int32" in evolved.output and "done: 2 records" in evolved.output
        assert table.schema.arrow_schema.field("qty").type == pa.int32()

        def rows() -> list[tuple[int, str, int | None]]:
            got = table.read().to_pylist()
            return sorted((r["id"], r["v"], r.get("qty")) for r in got)

        want = [(1, "a2", 7), (2, "b", None), (3, "c", 5)]
        # the running worker opened the table before the column existed
        wait_for(lambda: rows() == want, 60, "the new column in the table", worker)
    finally:
        worker.stop()
