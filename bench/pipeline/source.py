"""The benchmark's input: Debezium MySQL-shaped CDC topics of orders, produced at a
controlled rate, and of customers, the connector's initial snapshot (``op: r``).

Each change is a real Debezium envelope (``before``/``after``/``op``/``ts_ms``/``source``,
keyed by ``{"order_id": N}``), built for a whole chunk at once with polars; the state of
the "database" is numpy arrays indexed by order id, so a chunk of changes is a handful of
vectorized steps. Every change stamps ``event_ms`` (the production time) into its row:
the clock freshness is measured against.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import polars as pl
from confluent_kafka import Producer

from bridge.demo.model import CITIES, STATUSES
from logstore.client_config import confluent_config

#: the change mix of a chunk: inserts, updates, deletes (the demo's proportions)
MIX = (0.65, 0.27, 0.08)
#: the change mix once the initial load is in: as many deletes as inserts keep the number
#: of live orders, hence the tables, steady (the soak; the pipeline benchmark's search,
#: whose every step must meet tables of the same size)
STEADY_MIX = (0.3, 0.4, 0.3)
_SOURCE = {"version": "2.7.3.Final", "connector": "mysql", "name": "bench", "db": "bench",
           "table": "orders", "snapshot": "false"}  # fmt: skip
_SNAPSHOT_SOURCE = _SOURCE | {"table": "customers", "snapshot": "true"}


@dataclass
class OrdersDatabase:
    """The source table the CDC stream describes."""

    customers: int = 2_000
    capacity: int = 4_000_000
    seed: int = 11
    #: the change mix of the next chunks (inserts, updates, deletes); the soak sets one that
    #: deletes as much as it inserts, so the table stops growing
    mix: tuple[float, float, float] = MIX
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.alive = np.zeros(self.capacity, dtype=bool)
        self.customer = np.zeros(self.capacity, dtype=np.int64)
        self.status = np.zeros(self.capacity, dtype=np.int64)
        self.amount = np.zeros(self.capacity, dtype=np.int64)
        self.event_ms = np.zeros(self.capacity, dtype=np.int64)
        self.next_id = 0
        self.city = np.array(CITIES)[self.rng.integers(0, len(CITIES), self.customers)]

    def customer_snapshot(self, now_ms: int) -> pl.DataFrame:
        """Every customer as Debezium's initial snapshot writes it (``op: r``, no before),
        columns ``key`` and ``value`` (JSON)."""
        rows = pl.DataFrame({"customer_id": np.arange(self.customers), "city": self.city})
        return rows.select(
            pl.concat_str(
                [pl.lit('{"customer_id":'), pl.col("customer_id").cast(pl.String), pl.lit("}")]
            ).alias("key"),
            pl.struct(
                pl.lit(None).alias("before"),
                pl.struct(rows.columns).alias("after"),
                pl.lit(_SNAPSHOT_SOURCE | {"ts_ms": now_ms}).alias("source"),
                pl.lit("r").alias("op"),
                pl.lit(now_ms).alias("ts_ms"),
            )
            .struct.json_encode()
            .alias("value"),
        )

    def _pick_live(self, n: int) -> np.ndarray:
        """Up to n distinct live orders, without a pass over all of them while live orders
        are dense among the ids (a growing table's)."""
        if self.next_id == 0 or n <= 0:
            return np.zeros(0, dtype=np.int64)
        cand = np.unique(self.rng.integers(0, self.next_id, 4 * n + 16))
        cand = cand[self.alive[cand]]
        if len(cand) < n:
            # sparse: a mix that deletes as much as it inserts keeps the live orders a
            # shrinking share of the ids, and a sample would find ever fewer of them
            cand = np.flatnonzero(self.alive[: self.next_id])
        return self.rng.permutation(cand)[:n]

    def _rows(self, ids: np.ndarray) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "order_id": ids,
                "customer_id": self.customer[ids],
                "status": np.array(STATUSES)[self.status[ids]],
                "amount_cents": self.amount[ids],
                "event_ms": self.event_ms[ids],
            }
        )

    def changes(self, n: int, now_ms: int) -> pl.DataFrame:
        """n changes (c, u, d) as Debezium envelopes: columns ``key`` and ``value`` (JSON)."""
        inserts = int(n * self.mix[0])
        picked = self._pick_live(n - inserts)
        # deletes first: a late tick's chunk can be larger than the live orders (run 2 of
        # 2026-11-29: a 64,000/s step's generator, starved, sent chunks of seconds), and
        # updates taken first then left no deletes for its inserts, so the live orders (and
        # every later step's tables) grew 4.6x in one step
        # the deletes' share rounded as the inserts' is, the updates' taking the remainder:
        # a mix of as many deletes as inserts then keeps the live orders exactly steady,
        # chunk after chunk (the deletes took the remainder until soak run 7, a change a
        # chunk or so: its live orders fell from 33,391 to 31,985 in 25 minutes)
        wanted = int(n * self.mix[2])
        n_del = min(len(picked), wanted)
        # fewer live orders than the chunk deletes: as many fewer inserts, so the live
        # orders change by what the mix means (none, with the steady mix)
        inserts = max(0, inserts - (wanted - n_del))
        dele, upd = picked[:n_del], picked[n_del:]
        before_upd, before_del = self._rows(upd), self._rows(dele)
        self.alive[dele] = False
        advance = self.rng.integers(1, len(STATUSES), len(upd))
        self.status[upd] = np.minimum(self.status[upd] + advance, len(STATUSES) - 1)
        self.amount[upd] = np.maximum(
            self.amount[upd] + self.rng.integers(-300, 300, len(upd)), 100
        )
        self.event_ms[upd] = now_ms
        new = np.arange(self.next_id, min(self.next_id + inserts, self.capacity))
        self.next_id += len(new)
        self.alive[new] = True
        self.customer[new] = self.rng.integers(0, self.customers, len(new))
        self.status[new] = 0
        self.amount[new] = self.rng.integers(500, 30_000, len(new))
        self.event_ms[new] = now_ms
        null = pl.lit(None)
        parts = [
            (self._rows(new), None, "c"),
            (before_upd, self._rows(upd), "u"),
            (before_del, None, "d"),
        ]
        frames = []
        for first, second, op in parts:
            if first.is_empty():
                continue
            image = pl.struct(first.columns)
            if op == "c":
                before, after = null, image
            elif op == "d":
                before, after = image, null
            else:
                after_df = second.rename({c: f"a_{c}" for c in second.columns})  # type: ignore[union-attr]
                first = pl.concat([first, after_df], how="horizontal")
                before = image
                after = pl.struct([pl.col(f"a_{c}").alias(c) for c in second.columns])  # type: ignore[union-attr]
            frames.append(
                first.select(
                    pl.concat_str(
                        [pl.lit('{"order_id":'), pl.col("order_id").cast(pl.String), pl.lit("}")]
                    ).alias("key"),
                    pl.struct(
                        before.alias("before"),
                        after.alias("after"),
                        pl.lit(_SOURCE | {"ts_ms": now_ms}).alias("source"),
                        pl.lit(op).alias("op"),
                        pl.lit(now_ms).alias("ts_ms"),
                    )
                    .struct.json_encode()
                    .alias("value"),
                )
            )
        if not frames:
            return pl.DataFrame(
                {"key": [], "value": []}, schema={"key": pl.String, "value": pl.String}
            )
        return pl.concat(frames)

    def live_orders(self) -> int:
        return int(self.alive[: self.next_id].sum())

    def live_rows(self) -> pl.DataFrame:
        """Every live order as the source table holds it: what a caught-up ``orders`` must
        equal."""
        return self._rows(np.flatnonzero(self.alive[: self.next_id]))


def cdc_producer(bootstrap: str) -> Producer:
    return Producer(
        confluent_config(
            bootstrap,
            {"linger.ms": 20, "batch.size": 1 << 20, "compression.type": "lz4", "log_level": 3},
            {"enable.idempotence": True},
        )
    )


#: a ``StepResult``'s rate when nothing paced it: an initial load goes as fast as it goes
LOAD_RATE = 0


@dataclass
class StepResult:
    rate: int  # the rate asked for; LOAD_RATE for a load
    started: float  # unix seconds
    ended: float
    produced: int
    #: the newest change's stamp (unix seconds): behind ``ended`` by however long the last
    #: chunk took to produce, seconds when the generator itself falls behind its rate
    last_stamp: float = 0.0

    @property
    def achieved(self) -> float:
        return self.produced / max(self.ended - self.started, 1e-9)

    def extended(self, more: StepResult) -> StepResult:
        """This step and ``more``, produced right after it, as one step."""
        return StepResult(
            self.rate, self.started, more.ended, self.produced + more.produced, more.last_stamp
        )


def produce_load(
    db: OrdersDatabase, producer: Producer, topic: str, n: int, chunk: int = 20_000
) -> StepResult:
    """Exactly ``n`` changes as fast as they go, delivered before it returns: an initial
    load of the same changes (the generator is seeded) for every side, however fast each
    side's machine took it. A rate's ticks in one second made the load as large as the
    ticks that fitted: 122,000 changes (73,000 live orders) for dts and 182,000-220,000 for
    the stitched stacks of 2026-11-29/30."""
    started = time.time()
    produced, stamp_ms = 0, 0
    while produced < n:
        stamp_ms = int(time.time() * 1000)
        part = db.changes(min(chunk, n - produced), stamp_ms)
        if part.is_empty():  # a mix that deletes as much as it inserts, on no live orders
            raise ValueError(f"the mix {db.mix} makes no changes on an empty table")
        produced += _send(producer, topic, part)
    if producer.flush(30):
        raise RuntimeError(f"the initial load was not delivered to {topic} in 30 s")
    return StepResult(LOAD_RATE, started, time.time(), produced, stamp_ms / 1000)


def produce_customers(db: OrdersDatabase, producer: Producer, topic: str) -> int:
    """The customers' snapshot, all of it, delivered before it returns."""
    chunk = db.customer_snapshot(int(time.time() * 1000))
    _send(producer, topic, chunk)
    if producer.flush(30):
        raise RuntimeError(f"the customers' snapshot was not delivered to {topic} in 30 s")
    return chunk.height


def _send(producer: Producer, topic: str, chunk: pl.DataFrame) -> int:
    """A chunk of changes handed to the client (one call a record: it has no batch call),
    then its delivery callbacks served; the chunk's size."""
    for key, value in zip(chunk["key"].to_list(), chunk["value"].to_list(), strict=True):
        _produce(producer, topic, key, value)
    producer.poll(0)
    return chunk.height


def _produce(producer: Producer, topic: str, key: str, value: str) -> None:
    """One change; while the client's local queue is full (a large initial load at once),
    wait for deliveries to make room."""
    while True:
        try:
            producer.produce(topic, value=value, key=key)
            return
        except BufferError:
            producer.poll(0.5)


def produce_step(
    db: OrdersDatabase,
    producer: Producer,
    topic: str,
    rate: int,
    seconds: float,
    tick_s: float = 0.1,
) -> StepResult:
    """Produce ``rate`` changes a second for ``seconds``, in ticks of ``tick_s``: each tick
    makes the changes due by then (a late tick catches up, so the rate holds on average)."""
    started = time.time()
    produced, stamp_ms = 0, 0
    while True:
        now = time.time()
        if now - started >= seconds:
            break
        due = int(rate * (now - started + tick_s)) - produced
        if due > 0:
            stamp_ms = int(now * 1000)
            produced += _send(producer, topic, db.changes(due, stamp_ms))
        time.sleep(max(0.0, started + (produced / rate) - time.time()) if rate else tick_s)
    producer.flush(30)
    return StepResult(rate, started, time.time(), produced, stamp_ms / 1000)
