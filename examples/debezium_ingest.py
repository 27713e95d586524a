"""Debezium into a table: `dts ingest` copies a connector's topic, whole transactions per
barrier, a truncate applied, and `dts worker` commits one snapshot per barrier.

A PostgreSQL connector with ``provide.transaction.metadata=true`` wrote (here: this
script, in Debezium 2.x's JsonConverter shape) three source transactions on
``shop.public.orders`` (three partitions) and their BEGIN/END events on
``shop.transaction``; once they are copied, a TRUNCATE and one more order. `dts ingest
--transaction-topic` closes barriers only between transactions; the worker then commits
the table, emptied by the truncate in the snapshot of its barrier.

    dts broker &                                   # or any Kafka: DTS_BOOTSTRAP
    DTS_WAREHOUSE=./warehouse python examples/debezium_ingest.py
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import defaultdict

import orjson
from _common import BOOTSTRAP, ORDERS_SCHEMA, WAREHOUSE, fresh_table
from confluent_kafka import Producer

from bridge.tables import log_spec_for
from logstore.gate import DataBatch, Truncated
from logstore.reader import LogReader
from logstore.topics import create_topic

TABLE = "examples.debezium_orders"
SOURCE = {"connector": "postgresql", "db": "shop", "schema": "public", "table": "orders"}
TIMEOUT_S = 60


def change(order: int, customer: int, cents: int, txn: str | None, op: str = "c") -> bytes:
    after = {"order_id": order, "customer_id": customer, "amount_cents": cents, "status": "new"}
    block = {"id": txn, "total_order": 1, "data_collection_order": 1} if txn else None
    return orjson.dumps({"before": None, "after": after, "source": SOURCE, "op": op,
                         "transaction": block})  # fmt: skip


def produce_source(topic: str, txn_topic: str) -> None:
    p = Producer({"bootstrap.servers": BOOTSTRAP})
    order = 0
    for t, size in enumerate((5, 8, 3)):  # three source transactions
        txn = f"{571 + t}:{24023928 + t}"
        p.produce(txn_topic, orjson.dumps({"status": "BEGIN", "id": txn}))
        for _ in range(size):
            order += 1
            p.produce(topic, change(order, order % 4, 100 * order, txn), partition=order % 3)
        end = {"status": "END", "id": txn, "event_count": size,
               "data_collections": [{"data_collection": "public.orders", "event_count": size}]}  # fmt: skip
        p.produce(txn_topic, orjson.dumps(end))
    p.flush(30)


def produce_truncate(topic: str) -> None:
    """TRUNCATE orders, then one new order (Debezium's truncate event: no key, no images).

    Kafka orders records per partition only: a truncate is applied where it arrives among
    the records of the other partitions, so it is produced once those were copied."""
    p = Producer({"bootstrap.servers": BOOTSTRAP})
    p.produce(topic, orjson.dumps({"source": SOURCE, "op": "t"}), partition=0)
    p.produce(topic, change(100, 1, 4200, None), partition=0)
    p.flush(30)


def main() -> None:
    table = fresh_table(TABLE, ORDERS_SCHEMA, ["order_id"], {"bucket": "2"})
    run = uuid.uuid4().hex[:6]
    topic, txn_topic = f"shop.public.orders.{run}", f"shop.transaction.{run}"
    create_topic(BOOTSTRAP, topic, 3, {})
    create_topic(BOOTSTRAP, txn_topic, 1, {})
    produce_source(topic, txn_topic)

    ingest = [sys.executable, "-m", "bridge", "ingest", "--from-topic", topic,
              "--table", TABLE, "--warehouse", WAREHOUSE, "--bootstrap", BOOTSTRAP,
              "--transaction-topic", txn_topic, "--barrier-interval", "0.05",
              "--idle-exit", "2"]  # fmt: skip
    for truncate_first in (False, True):
        if truncate_first:
            produce_truncate(topic)
        done = subprocess.run(ingest, capture_output=True, text=True, timeout=TIMEOUT_S, check=True)
        print(done.stdout.strip())

    # each source transaction sits in one barrier of the log; the truncate in its place,
    # after the -D of every order it removed (the reader normalizes the upsert log)
    barriers_of: dict[int, set[int]] = defaultdict(set)  # source transaction -> barriers
    removed = 0
    with LogReader(BOOTSTRAP, log_spec_for(table), stop_at_end=True, idle_timeout_s=10) as log:
        for event in log:
            if isinstance(event, Truncated):
                print(f"truncate on partition {event.partition} in barrier {event.barrier}")
            elif isinstance(event, DataBatch):
                t = event.table
                for order, barrier, kind in zip(t["order_id"].to_pylist(), t["_barrier"].to_pylist(),
                                                t["_row_kind"].to_pylist(), strict=True):  # fmt: skip
                    if kind == "-D":  # the source deleted nothing: the truncate's removals
                        removed += 1
                    elif order <= 16:
                        barriers_of[0 if order <= 5 else 1 if order <= 13 else 2].add(barrier)
    print(f"barriers of each source transaction: {dict(barriers_of)}")
    print(f"the truncate removed {removed} orders (-D rows before it)")
    assert len(barriers_of) == 3 and all(len(b) == 1 for b in barriers_of.values())
    assert removed == 16

    worker = subprocess.Popen(
        [sys.executable, "-m", "bridge", "worker", "--warehouse", WAREHOUSE,
         "--bootstrap", BOOTSTRAP, "--tables", TABLE, "--web-port", "0",
         "--group", f"examples-debezium-{run}"],
    )  # fmt: skip
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            rows = table.read().to_pylist()
            if [r["order_id"] for r in rows] == [100]:
                break
            time.sleep(0.5)
        else:
            raise SystemExit(f"the worker did not commit the truncate in {TIMEOUT_S}s: {rows}")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    print(f"{TABLE} after the truncate: {rows}")
    print("OK: whole source transactions per barrier, and the truncate emptied the table")


if __name__ == "__main__":
    main()
