"""Source transactions (Debezium's ``provide.transaction.metadata``): where a barrier may cut.

Debezium tags every change event of a transaction with ``transaction.id`` and writes a
``BEGIN`` and an ``END`` event to the transaction topic (PostgreSQL's ids differ from
event to event in their LSN part: ``transaction_key``); the ``END`` event counts the
transaction's events per data collection (table). A barrier of the ingest may close
only where no transaction of the table is open: every transaction whose events it
wrote is complete (its ``END`` seen and as many of its events written as ``END`` counts
for this table), and none of its events lies after the cut. A transaction that spans
several tables is then whole in each table's barriers.

The transaction topic's offset committed with a barrier is the ``END`` of the oldest
transaction not yet complete (else the position read), so a restarted ingest reads the
``END`` events it still needs.

A Kafka Connect worker that dies sends again what it produced after its last flushed
source offset. An event of an open transaction may arrive twice: events count once by
their ``transaction.total_order`` (unique within a transaction), else a redelivered half
of a transaction would look whole and a barrier would split it. A transaction already
complete arrives again whole: its events and its ``END`` are dropped
(``redelivered``), else its updates would set rows back to what they were before the
transactions that followed it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from logstore.envelope import combined, read_json_values

#: completed transactions remembered to drop their events when a connector sends them
#: again (a Connect worker redelivers what it wrote after its last offset flush, 1 s by
#: default in ``logstore.connect``, 60 s in Connect's own default)
DONE_KEPT = 20_000

_ID = pa.struct([pa.field("id", pa.string()), pa.field("total_order", pa.int64())])
_IDS_SCHEMA = pa.schema(
    [pa.field("transaction", _ID), pa.field("payload", pa.struct([pa.field("transaction", _ID)]))]
)


#: PostgreSQL's ids are ``<txId>:<LSN>`` with the LSN of each event (the BEGIN, every
#: change and the END each carry their own, seen with Debezium 3.6's connector): the
#: transaction is its txId
_PG_ID = r"^(\d+):\d+$"


def transaction_key(txn_id: str) -> str:
    """What identifies a transaction in its events, its BEGIN and its END."""
    return re.sub(_PG_ID, r"\1", txn_id)


def transaction_ids(values: pa.Array) -> pa.Array:
    """Each record's transaction (``transaction_key`` of its ``transaction.id``; null
    outside transactions), one vectorized parse."""
    return transaction_events(values)[0]


def transaction_events(values: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Each record's transaction (as ``transaction_ids``) and its ``total_order`` in it
    (null where the event carries none), one vectorized parse."""
    if len(values) == 0:
        return pa.array([], pa.string()), pa.array([], pa.int64())
    env = read_json_values(values, _IDS_SCHEMA)
    top = combined(env.column("transaction"))
    inner = combined(env.column("payload")).field("transaction")
    ids = pc.coalesce(top.field("id"), inner.field("id"))
    orders = pc.coalesce(top.field("total_order"), inner.field("total_order"))
    return pc.replace_substring_regex(ids, _PG_ID, r"\1"), orders


def collection_names(value: bytes) -> set[str]:
    """The names Debezium may give the table of a change event in ``data_collections``
    (``db.table`` for MySQL, ``schema.table`` for PostgreSQL, ``db.schema.table``)."""
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return set()
    env = doc.get("payload", doc) if isinstance(doc, dict) else {}
    source = env.get("source") if isinstance(env, dict) else None
    if not isinstance(source, dict) or not source.get("table"):
        return set()
    table, db, schema = source["table"], source.get("db"), source.get("schema")
    names = {f"{p}.{table}" for p in (db, schema) if p}
    if db and schema:
        names.add(f"{db}.{schema}.{table}")
    return names


@dataclass
class TransactionTracker:
    """What the ingest knows of its table's source transactions."""

    collections: set[str] = field(default_factory=set)
    # source topics whose data collection is not known yet (no name given, no event read):
    # until each is, no transaction counts as complete (its events there are not counted)
    unnamed: set[str] = field(default_factory=set)
    # id -> events per data collection, from its END (kept until the table's are known)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    end_offset: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> END's (p, o)
    written: dict[str, int] = field(default_factory=dict)  # id -> events written
    # id -> total_order of each event written (open transactions): a redelivered one
    # counts once
    orders: dict[str, set[int]] = field(default_factory=dict)
    # the transactions completed last (oldest first, at most DONE_KEPT): sent again by a
    # restarted connector, they are dropped
    done: dict[str, None] = field(default_factory=dict)
    _done_array: pa.Array | None = field(default=None, repr=False, compare=False)
    # completed since the last barrier took them (``take_completed``): the ingest commits
    # them with the barrier, so a restarted ingest still knows them (``remember``)
    completed: list[str] = field(default_factory=list)
    position: dict[int, int] = field(default_factory=dict)  # transaction topic: next offset

    def on_transaction_events(self, records: Sequence[tuple[int, int, bytes | None]]) -> None:
        """``(partition, offset, value)`` of transaction-topic records (BEGIN/END)."""
        for p, o, value in records:
            self.position[p] = o + 1
            try:
                doc = orjson.loads(value) if value else None
            except orjson.JSONDecodeError:
                continue  # not a transaction event: nothing it could tell
            env = doc.get("payload", doc) if isinstance(doc, dict) else None
            if not isinstance(env, dict) or env.get("status") != "END" or not env.get("id"):
                continue
            txn = transaction_key(str(env["id"]))
            if txn in self.done:
                continue  # sent again after a connector restart: its events are dropped
            self.counts[txn] = {
                str(c.get("data_collection")): int(c.get("event_count") or 0)
                for c in env.get("data_collections") or []
                if isinstance(c, dict)
            }
            self.end_offset[txn] = (p, o)
        self._forget_complete()

    def expected(self, txn: str) -> int | None:
        """This table's events in ``txn`` (None: its END not read yet)."""
        counts = self.counts.get(txn)
        if counts is None:
            return None
        return sum(n for name, n in counts.items() if name in self.collections)

    def name(self, topic: str, names: set[str]) -> None:
        """A source topic's data collection, by its names (``collection_names``)."""
        self.collections |= names
        self.unnamed.discard(topic)

    def complete(self, txn: str, extra: int = 0) -> bool:
        if self.unnamed:
            return False
        want = self.expected(txn)
        return want is not None and self.written.get(txn, 0) + extra >= want

    def all_complete(self) -> bool:
        return all(self.complete(t) for t in self.written)

    def record(self, ids: pa.Array, orders: pa.Array | None = None) -> None:
        """Events of these transactions were written (``orders``: their total_order, so
        an event sent again counts once)."""
        if len(ids) == 0 or ids.null_count == len(ids):
            return
        for txn, n in self._new_events(ids, orders, keep=True).items():
            self.written[txn] = self.written.get(txn, 0) + n
        self._forget_complete()

    def _new_events(
        self, ids: pa.Array, orders: pa.Array | None, *, keep: bool = False
    ) -> dict[str, int]:
        """Per transaction, its events among these not counted before (``keep``: count
        them from now on)."""
        frame = pl.DataFrame({"id": pl.Series(ids, dtype=pl.String)})
        if orders is None:
            counts = frame.drop_nulls("id").group_by("id").len()
            return {str(t): int(n) for t, n in counts.iter_rows()}
        frame = frame.with_columns(order=pl.Series(orders, dtype=pl.Int64)).drop_nulls("id")
        out: dict[str, int] = {}
        grouped = frame.group_by("id").agg(pl.col("order").drop_nulls().unique(), pl.len())
        for txn, seen_now, n in grouped.iter_rows():
            if len(seen_now) < n:  # events without an order (not Debezium's): each counts
                out[txn] = n
                continue
            before = self.orders.get(txn, set())
            fresh = set(seen_now) - before
            out[txn] = len(fresh)
            if keep:
                self.orders[txn] = before | fresh
        return out

    def _forget_complete(self) -> None:
        if not self.collections or self.unnamed:
            return  # which events are the tables' is not known yet
        done = [t for t in self.counts if self.complete(t)]  # incl. those with none of ours
        for txn in done:
            self.written.pop(txn, None)
            self.orders.pop(txn, None)
            self.counts.pop(txn, None)
            self.end_offset.pop(txn, None)
            self.done[txn] = None
        self.completed += done
        if done:
            self._done_array = None
            for old in list(self.done)[: max(0, len(self.done) - DONE_KEPT)]:
                del self.done[old]

    def take_completed(self) -> list[str]:
        """The transactions completed since the last call (to commit with a barrier)."""
        taken, self.completed = self.completed, []
        return taken

    def remember(self, completed: Sequence[str]) -> None:
        """Transactions an earlier run completed (oldest first): sent again, dropped."""
        for txn in completed[-DONE_KEPT:]:
            self.done[txn] = None
        self._done_array = None

    def redelivered(self, ids: pa.Array) -> np.ndarray:
        """Which of these events belong to a transaction already complete (sent again)."""
        if not self.done or len(ids) == 0:
            return np.zeros(len(ids), dtype=bool)
        if self._done_array is None:
            self._done_array = pa.array(list(self.done), pa.string())
        found = pc.is_in(ids, value_set=self._done_array)
        return np.asarray(pc.fill_null(found, False).to_numpy(zero_copy_only=False), dtype=bool)

    def cut(self, ids: pa.Array, orders: pa.Array | None = None) -> int | None:
        """The greatest index of this batch (in arrival order) a barrier may close before,
        given what was written before it; None when no cut is clean."""
        n = len(ids)
        fresh = self._new_events(ids, orders)
        open_before = {t for t in self.written if not self.complete(t)}
        frame = pl.DataFrame({"id": pl.Series(ids)}).with_row_index("i")
        spans = (
            frame.drop_nulls("id")
            .group_by("id")
            .agg(pl.col("i").min().alias("first"), pl.col("i").max().alias("last"), pl.len())
        )
        blocked = np.zeros(n + 2, dtype=np.int64)  # difference array over cut positions
        for txn, first, last, count in spans.iter_rows():  # one row per transaction
            open_before.discard(txn)  # judged by its span in this batch
            # a cut must not split it: not inside its span, nor before its rest when
            # part of it was written already, nor anywhere after it while it is open
            start = 0 if txn in self.written else first + 1
            end = last + 1 if self.complete(txn, fresh.get(txn, int(count))) else n + 1
            blocked[start] += 1
            blocked[end] -= 1
        if open_before:
            return None  # a transaction written earlier is still open
        ok = np.flatnonzero(np.cumsum(blocked)[: n + 1] == 0)
        return int(ok[-1]) if len(ok) else None

    def safe_offsets(self) -> dict[int, int]:
        """Per transaction-topic partition, the offset to commit with a barrier."""
        safe = dict(self.position)
        for p, o in self.end_offset.values():
            safe[p] = min(safe.get(p, o), o)
        return safe
