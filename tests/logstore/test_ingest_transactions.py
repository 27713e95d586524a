"""Debezium transaction metadata (issue 24), through a real broker: with the transaction
topic, no barrier of `dts ingest` splits a source transaction, even one spanning many
records, three partitions and two tables; without it, the same input is split."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from confluent_kafka import Producer

from bridge.tables import bucketer_for, log_spec_for
from filestore import Catalog, Table
from logstore.broker import EmbeddedBroker
from logstore.ingest import Ingestor, IngestSource
from logstore.reader import LogReader
from logstore.topics import create_topic

pytestmark = pytest.mark.kafka

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("txn", pa.string())])
TABLES = ("orders", "order_lines")


def _event(table: str, i: int, txn: str, order: int, total: int) -> bytes:
    return orjson.dumps(
        {
            "before": None,
            "after": {"id": i, "txn": txn},
            "source": {"connector": "postgresql", "db": "shop", "schema": "public", "table": table},
            "op": "c",
            "transaction": {"id": txn, "total_order": total, "data_collection_order": order},
        }
    )


def _produce(bootstrap: str, topics: dict[str, str], txn_topic: str, n_txns: int) -> None:
    """Transactions of 4-12 order rows and twice as many lines, spread over 3 partitions;
    BEGIN before and END after each one's events, as Debezium writes them; live, one
    transaction every 20 ms (a backlog read partition by partition has few clean cuts)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    next_id = {t: 0 for t in TABLES}
    for k in range(n_txns):
        txn = f"{k + 571}:{53195829 + k}"
        sizes = {"orders": 4 + k % 9, "order_lines": 2 * (4 + k % 9)}
        p.produce(txn_topic, orjson.dumps({"status": "BEGIN", "id": txn, "event_count": None}))
        total = 0
        for order in range(1, max(sizes.values()) + 1):
            for table in TABLES:
                if order <= sizes[table]:
                    total += 1
                    i = next_id[table]
                    next_id[table] += 1
                    value = _event(table, i, txn, order, total)
                    p.produce(topics[table], value, orjson.dumps({"id": i}), i % 3)
        end = {
            "status": "END",
            "id": txn,
            "event_count": total,
            "data_collections": [
                {"data_collection": f"public.{t}", "event_count": sizes[t]} for t in TABLES
            ],
        }
        p.produce(txn_topic, orjson.dumps(end))
        p.flush(10)
        time.sleep(0.02)


def _barriers_per_transaction(bootstrap: str, table: Table) -> dict[str, set[int]]:
    seen: dict[str, set[int]] = defaultdict(set)
    with LogReader(bootstrap, log_spec_for(table), stop_at_end=True, idle_timeout_s=10) as r:
        data, _ = r.read_all()
    for batch in data:
        for txn, barrier in zip(
            batch.table["txn"].to_pylist(), batch.table["_barrier"].to_pylist(), strict=True
        ):
            seen[txn].add(barrier)
    return seen


def _source_and_tables(
    broker: EmbeddedBroker, warehouse: Path
) -> tuple[dict[str, str], str, dict[str, Table]]:
    """A run's source topics (3 partitions), transaction topic and dts tables."""
    run = uuid.uuid4().hex[:6]
    topics = {t: f"pg.public.{t}.{run}" for t in TABLES}
    txn_topic = f"pg.transaction.{run}"
    for topic in topics.values():
        create_topic(broker.bootstrap, topic, 3, {})
    create_topic(broker.bootstrap, txn_topic, 1, {})
    tables = {
        t: Catalog(str(warehouse)).create_table(
            f"shop.{t}_{run}", SCHEMA, primary_key=["id"], options={"bucket": "2"}
        )
        for t in TABLES
    }
    return topics, txn_topic, tables


def _ingest_all(broker: EmbeddedBroker, warehouse: Path, txn_topic: str | None) -> dict:  # type: ignore[type-arg]
    topics, txn_topic_name, tables = _source_and_tables(broker, warehouse)
    ingestors = {
        t: Ingestor(
            broker.bootstrap,
            topics[t],
            log_spec_for(table),
            bucketer_for(table),
            barrier_interval_s=0.0,  # a barrier is due at every batch
            max_records=7,  # batches end inside transactions
            transaction_topic=txn_topic_name if txn_topic else None,
        )
        for t, table in tables.items()
    }
    with ThreadPoolExecutor(3) as pool:  # both tables ingested while the source writes
        runs = {t: pool.submit(i.run, idle_exit_s=3) for t, i in ingestors.items()}
        _produce(broker.bootstrap, topics, txn_topic_name, n_txns=40)
        stats = {t: r.result(timeout=120) for t, r in runs.items()}
    for i in ingestors.values():
        i.close()
    out = {}
    for t, table in tables.items():
        assert stats[t].split_transactions == 0
        out[t] = (_barriers_per_transaction(broker.bootstrap, table), stats[t])
    return out


def test_barriers_never_split_a_source_transaction(broker: EmbeddedBroker, warehouse: Path) -> None:
    for table, (seen, stats) in _ingest_all(broker, warehouse, "yes").items():
        assert len(seen) == 40, table
        assert stats.barriers >= 5, table  # many barriers, each holding whole transactions
        split = {txn: b for txn, b in seen.items() if len(b) > 1}
        assert not split, f"{table}: transactions split across barriers: {split}"


def test_without_the_transaction_topic_the_same_input_is_split(
    broker: EmbeddedBroker, warehouse: Path
) -> None:
    results = _ingest_all(broker, warehouse, None)
    assert any(len(b) > 1 for seen, _ in results.values() for b in seen.values())


def test_one_ingest_of_both_tables_puts_each_transaction_in_one_shared_barrier(
    broker: EmbeddedBroker, warehouse: Path
) -> None:
    """One ingest per source database: both tables' logs carry the same barrier ids, and a
    transaction's rows are in the same barrier in both (a consistent read at any barrier
    shows the database at one committed transaction). Per-topic ingests (above) number
    their barriers apart, so no barrier of one table is a barrier of the other."""
    topics, txn_topic, tables = _source_and_tables(broker, warehouse)
    orders, lines = tables["orders"], tables["order_lines"]
    ingestor = Ingestor(
        broker.bootstrap,
        topics["orders"],
        log_spec_for(orders),
        bucketer_for(orders),
        group_id=f"dts-ingest-{txn_topic}",
        barrier_interval_s=0.0,  # a barrier is due at every batch
        max_records=7,  # batches end inside transactions, and mix the two topics
        transaction_topic=txn_topic,
        collection="public.orders",
        more=[
            IngestSource(
                topics["order_lines"],
                log_spec_for(lines),
                bucketer_for(lines),  # its data collection learnt from its first event
            )
        ],
    )
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(ingestor.run, idle_exit_s=3)
        _produce(broker.bootstrap, topics, txn_topic, n_txns=40)
        stats = running.result(timeout=120)
    ingestor.close()
    assert stats.split_transactions == 0 and stats.barriers >= 5
    seen = {t: _barriers_per_transaction(broker.bootstrap, table) for t, table in tables.items()}
    assert len(seen["orders"]) == len(seen["order_lines"]) == 40
    for txn, barriers in seen["orders"].items():
        assert len(barriers) == 1, f"{txn} split in orders: {barriers}"
        assert seen["order_lines"][txn] == barriers, (
            f"{txn}: {barriers} vs {seen['order_lines'][txn]}"
        )
    markers = []
    for table in tables.values():
        with LogReader(broker.bootstrap, log_spec_for(table), stop_at_end=True) as r:
            markers.append({passed.barrier for passed in r.read_all()[1]})
    assert markers[0] == markers[1] and len(markers[0]) == stats.barriers


def test_a_restarted_ingest_drops_what_a_restarted_connector_sends_again(
    broker: EmbeddedBroker, warehouse: Path
) -> None:
    """A Connect worker and the ingest restart together: Connect sends again transactions
    the ingest had completed and committed before it stopped. The new ingest reads them
    back from its completed-transactions topic (committed with each barrier) and drops
    them: every transaction's rows are in the table's log once."""
    run = uuid.uuid4().hex[:6]
    topic, txn_topic = f"pg.public.orders.{run}", f"pg.transaction.{run}"
    create_topic(broker.bootstrap, topic, 1, {})
    create_topic(broker.bootstrap, txn_topic, 1, {})
    table = Catalog(str(warehouse)).create_table(
        f"shop.orders_{run}", SCHEMA, primary_key=["id"], options={"bucket": "1"}
    )
    producer = Producer({"bootstrap.servers": broker.bootstrap})

    def send(ks: range) -> None:
        """Each transaction inserts order k and updates order 0."""
        for k in ks:
            txn = f"{900 + k}:{1000 + k}"
            producer.produce(txn_topic, orjson.dumps({"status": "BEGIN", "id": txn}))
            for order, i in enumerate((k, 0), 1):
                producer.produce(topic, _event("orders", i, txn, order, order))
            end = {
                "status": "END",
                "id": txn,
                "event_count": 2,
                "data_collections": [{"data_collection": "public.orders", "event_count": 2}],
            }
            producer.produce(txn_topic, orjson.dumps(end))
        producer.flush(10)

    def ingest() -> Ingestor:
        return Ingestor(
            broker.bootstrap,
            topic,
            log_spec_for(table),
            bucketer_for(table),
            group_id=f"dts-ingest-{run}",
            barrier_interval_s=0.0,
            transaction_topic=txn_topic,
            collection="public.orders",
        )

    send(range(1, 7))
    first = ingest()
    assert first.run(idle_exit_s=3).barriers >= 1
    first.close()
    send(range(3, 7))  # the restarted connector's repeats: transactions 3 to 6 again
    send(range(7, 8))
    second = ingest()
    stats = second.run(idle_exit_s=3)
    second.close()
    assert stats.redelivered == 8, stats  # both events of each repeated transaction
    with LogReader(
        broker.bootstrap, log_spec_for(table), stop_at_end=True, normalize=False
    ) as reader:
        data, _ = reader.read_all()
    per_txn: dict[str, int] = defaultdict(int)
    for batch in data:
        for txn in batch.table["txn"].to_pylist():
            per_txn[txn] += 1
    assert per_txn == {f"{900 + k}:{1000 + k}": 2 for k in range(1, 8)}
