"""Where a barrier may cut a batch of source events (logstore.transactions), no broker."""

from __future__ import annotations

import orjson
import pyarrow as pa

from logstore.transactions import (
    TransactionTracker,
    collection_names,
    transaction_events,
    transaction_ids,
    transaction_key,
)


def _end(txn: str, ours: int, other: int = 0) -> bytes:
    counts = [{"data_collection": "public.orders", "event_count": ours}]
    counts.append({"data_collection": "public.lines", "event_count": other})
    return orjson.dumps({"status": "END", "id": txn, "data_collections": counts})


def test_cuts_only_between_complete_transactions() -> None:
    tr = TransactionTracker(collections={"public.orders"})
    tr.on_transaction_events([(0, 0, _end("a", 2)), (0, 1, b"not json"), (0, 2, _end("b", 3))])
    ids = pa.array(["a", "a", None, "b", "b", "c"])
    assert tr.cut(ids) == 3  # a complete and before 3; b (2 of 3) and c (no END) open
    tr.record(ids[:3])
    assert tr.written == {} and tr.all_complete()
    assert tr.cut(ids[3:]) == 0  # b and c still open: only before them
    tr.record(ids[3:5])
    assert not tr.all_complete()
    assert tr.cut(pa.array(["b", "d"])) == 1  # b's last event first; d unknown after it
    assert tr.cut(pa.array(["d", "b"])) is None  # d would be split from b's rest: no cut
    assert tr.safe_offsets() == {0: 2}  # b's END is still needed after a restart


def test_transactions_without_events_of_this_table_are_forgotten() -> None:
    tr = TransactionTracker(collections={"public.orders"})
    tr.on_transaction_events([(0, 5, _end("x", 0, other=4))])
    assert tr.counts == {} and tr.safe_offsets() == {0: 6}


def test_collection_names_from_the_source_block() -> None:
    pg = {"source": {"db": "shop", "schema": "public", "table": "orders"}, "op": "c"}
    assert collection_names(orjson.dumps(pg)) == {
        "shop.orders",
        "public.orders",
        "shop.public.orders",
    }
    assert collection_names(b"{not json") == set()


def test_postgres_ids_name_one_transaction_whatever_their_lsn() -> None:
    """Debezium 3.6's PostgreSQL connector gives each event of a transaction, its BEGIN
    and its END ids of the form ``<txId>:<LSN>`` with each one's own LSN (seen on a real
    connector): the transaction is its txId, or no barrier could ever close."""
    events = [
        orjson.dumps({"op": "u", "transaction": {"id": f"728:{lsn}"}, "after": {"id": 1}})
        for lsn in (22229912, 22230144)
    ]
    ids = transaction_ids(pa.array(events, pa.large_binary()))
    assert ids.to_pylist() == ["728", "728"]
    tr = TransactionTracker(collections={"public.orders"})
    tr.on_transaction_events([(0, 0, _end("728:22230296", 2))])
    tr.record(ids)
    assert tr.all_complete()
    assert transaction_key("file.000003:1204") == "file.000003:1204"  # MySQL's: as they are


def test_an_event_sent_again_counts_once() -> None:
    """A Connect worker that died sends again what it produced after its last flushed
    offset: the events of a transaction half delivered before the crash arrive twice.
    Counted by their total_order, the transaction is whole only when its last event is."""
    tr = TransactionTracker(collections={"public.orders"})
    tr.on_transaction_events([(0, 0, _end("t", 4))])
    tr.record(pa.array(["t"] * 3), pa.array([1, 2, 3]))  # before the crash
    again = pa.array(["t", "t"])
    assert tr.cut(again, pa.array([1, 2])) is None  # sent again: t still lacks event 4
    tr.record(again, pa.array([1, 2]))
    assert not tr.all_complete() and tr.written == {"t": 3}
    assert tr.cut(pa.array(["t", "t"]), pa.array([3, 4])) == 2  # 4 arrives: t is whole
    tr.record(pa.array(["t", "t"]), pa.array([3, 4]))
    assert tr.all_complete()


def test_total_order_is_read_beside_the_id() -> None:
    events = [
        orjson.dumps({"op": "c", "transaction": {"id": "9:1", "total_order": 2}}),
        orjson.dumps({"payload": {"op": "c", "transaction": {"id": "9:2", "total_order": 3}}}),
        orjson.dumps({"op": "r"}),
    ]
    ids, orders = transaction_events(pa.array(events, pa.large_binary()))
    assert ids.to_pylist() == ["9", "9", None] and orders.to_pylist() == [2, 3, None]


def test_a_complete_transaction_sent_again_is_dropped() -> None:
    """Sent again whole by a restarted connector, a transaction already complete must not
    be applied again: its updates would set rows back before the transactions after it."""
    tr = TransactionTracker(collections={"public.orders"})
    tr.on_transaction_events([(0, 0, _end("a", 2)), (0, 1, _end("b", 1))])
    tr.record(pa.array(["a", "a", "b"]), pa.array([1, 2, 1]))
    assert tr.all_complete() and list(tr.done) == ["a", "b"]
    again = pa.array(["a", "a", "b", "c", None])
    assert tr.redelivered(again).tolist() == [True, True, True, False, False]
    tr.on_transaction_events([(0, 2, _end("a", 2))])  # its END again: not counted anew
    assert tr.counts == {} and tr.safe_offsets() == {0: 3}


def test_no_transaction_is_complete_before_every_table_is_named() -> None:
    """An ingest of two tables that has read events of one only cannot tell how many of a
    transaction's events the other holds: it waits rather than cut (and drop) early."""
    tr = TransactionTracker(unnamed={"pg.public.lines"})
    tr.name("pg.public.orders", {"public.orders"})
    tr.on_transaction_events([(0, 0, _end("t", 1, other=2))])
    tr.record(pa.array(["t"]), pa.array([1]))
    assert not tr.complete("t") and tr.done == {}
    tr.name("pg.public.lines", {"public.lines"})
    tr.record(pa.array(["t", "t"]), pa.array([2, 3]))
    assert tr.all_complete() and list(tr.done) == ["t"]
