"""A CDC generator for the demo's sources: customers and orders change, one barrier per round.

Each round writes inserts, updates and deletes (a debezium-like change stream, as a
database's CDC would) through each table's ``LogWriter`` and then closes a barrier on
both logs. The state is kept in numpy arrays indexed by key, so a round is a handful
of vectorized operations, not a loop over rows.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bridge.demo.model import CITIES, CUSTOMERS_SCHEMA, ORDERS_SCHEMA, STATUSES, TIERS
from filestore.format.row_kind import ROW_KIND_COLUMN

_ROW_KIND = pa.field(ROW_KIND_COLUMN, pa.string())
_NAMES = ("Ada", "Bob", "Cyd", "Dee", "Eve", "Fay", "Gus", "Hal", "Ivy", "Jo")


@dataclass
class RoundSizes:
    """Changes per round (per barrier)."""

    new_orders: int = 40
    order_updates: int = 15
    order_deletes: int = 4
    customer_updates: int = 2


@dataclass
class GeneratedCounts:
    inserts: int = 0
    updates: int = 0
    deletes: int = 0

    def add(self, inserts: int, updates: int, deletes: int) -> None:
        self.inserts += inserts
        self.updates += updates
        self.deletes += deletes


@dataclass
class CdcState:
    """The source database the CDC stream describes (numpy columns indexed by key)."""

    customers: int
    capacity: int
    seed: int = 7
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        n = self.customers
        self.c_tier = self.rng.integers(0, len(TIERS), n)
        self.c_city = self.rng.integers(0, len(CITIES), n)
        self.o_alive = np.zeros(self.capacity, dtype=bool)
        self.o_customer = np.zeros(self.capacity, dtype=np.int64)
        self.o_status = np.zeros(self.capacity, dtype=np.int64)
        self.o_amount = np.zeros(self.capacity, dtype=np.int64)
        self.next_order = 0

    def customer_rows(self, ids: np.ndarray, kind: str) -> pa.Table:
        first = pa.array(np.array(_NAMES)[ids % len(_NAMES)])
        name = pc.binary_join_element_wise(first, pa.array(ids).cast(pa.string()), "-")
        return pa.table(
            {
                "customer_id": ids.astype(np.int64),
                "name": name,
                "tier": np.array(TIERS)[self.c_tier[ids]],
                "city": np.array(CITIES)[self.c_city[ids]],
                ROW_KIND_COLUMN: np.full(len(ids), kind),
            },
            schema=pa.schema([*CUSTOMERS_SCHEMA, _ROW_KIND]),
        )

    def order_rows(self, ids: np.ndarray, kinds: np.ndarray) -> pa.Table:
        return pa.table(
            {
                "order_id": ids.astype(np.int64),
                "customer_id": self.o_customer[ids],
                "status": np.array(STATUSES)[self.o_status[ids]],
                "amount_cents": self.o_amount[ids],
                ROW_KIND_COLUMN: kinds,
            },
            schema=pa.schema([*ORDERS_SCHEMA, _ROW_KIND]),
        )

    def new_orders(self, n: int) -> np.ndarray:
        n = min(n, self.capacity - self.next_order)
        ids = np.arange(self.next_order, self.next_order + n)
        self.next_order += n
        self.o_alive[ids] = True
        self.o_customer[ids] = self.rng.integers(0, self.customers, n)
        self.o_status[ids] = 0  # placed
        self.o_amount[ids] = self.rng.integers(500, 30_000, n)
        return ids

    def change_orders(self, updates: int, deletes: int) -> tuple[np.ndarray, np.ndarray]:
        """Pick distinct live orders; advance the updated ones' status (some get cancelled)."""
        live = np.flatnonzero(self.o_alive)
        picked = self.rng.permutation(live)[: updates + deletes]
        upd, dele = picked[:updates], picked[updates:]
        advance = self.rng.integers(1, len(STATUSES), len(upd))
        self.o_status[upd] = np.minimum(self.o_status[upd] + advance, len(STATUSES) - 1)
        self.o_amount[upd] += self.rng.integers(-300, 300, len(upd))
        self.o_amount[upd] = np.maximum(self.o_amount[upd], 100)
        return upd, dele

    def change_customers(self, n: int) -> np.ndarray:
        ids = self.rng.choice(self.customers, size=min(n, self.customers), replace=False)
        self.c_tier[ids] = np.minimum(self.c_tier[ids] + 1, len(TIERS) - 1)
        self.c_city[ids] = self.rng.integers(0, len(CITIES), len(ids))
        return ids


class CdcGenerator:
    """Writes the CDC stream of ``CdcState`` through two ``LogWriter``s, one barrier per round.

    ``writers`` maps "orders"/"customers" to a ``logstore.writer.LogWriter`` (from
    ``bridge.tables.open_log_writer`` with ``barrier_interval_s=None``: the generator
    closes barriers itself, after each round, on both logs).
    """

    def __init__(
        self,
        writers: dict[str, Any],
        customers: int = 40,
        initial_orders: int = 200,
        sizes: RoundSizes | None = None,
        seed: int = 7,
    ) -> None:
        self.writers = writers
        self.sizes = sizes or RoundSizes()
        self.state = CdcState(customers, capacity=1_000_000, seed=seed)
        self.initial_orders = initial_orders
        self.counts = {"orders": GeneratedCounts(), "customers": GeneratedCounts()}
        self.barriers: dict[str, list[int]] = {"orders": [], "customers": []}
        self.rounds = 0
        self._lock = threading.Lock()

    def snapshot_initial(self) -> None:
        """Round 0: the initial load (every customer, ``initial_orders`` orders) as inserts."""
        ids = np.arange(self.state.customers)
        self.writers["customers"].write(self.state.customer_rows(ids, "+I"))
        self.counts["customers"].add(len(ids), 0, 0)
        orders = self.state.new_orders(self.initial_orders)
        self.writers["orders"].write(self.state.order_rows(orders, np.full(len(orders), "+I")))
        self.counts["orders"].add(len(orders), 0, 0)
        self._close_barriers()

    def round(self) -> None:
        """One round of changes on both tables, then a barrier on both logs."""
        s, st = self.sizes, self.state
        upd, dele = st.change_orders(s.order_updates, s.order_deletes)
        # the deleted rows' before images are still in the arrays: emit them, then forget them
        deleted = st.order_rows(dele, np.full(len(dele), "-D"))
        st.o_alive[dele] = False
        new = st.new_orders(s.new_orders)
        ids = np.concatenate([new, upd])
        kinds = np.concatenate([np.full(len(new), "+I"), np.full(len(upd), "+U")])
        self.writers["orders"].write(pa.concat_tables([deleted, st.order_rows(ids, kinds)]))
        self.counts["orders"].add(len(new), len(upd), len(dele))
        cust = st.change_customers(s.customer_updates)
        self.writers["customers"].write(st.customer_rows(cust, "+U"))
        self.counts["customers"].add(0, len(cust), 0)
        self._close_barriers()

    def _close_barriers(self) -> None:
        with self._lock:
            for name, writer in self.writers.items():
                self.barriers[name].append(writer.barrier())
            self.rounds += 1

    def last_barrier(self, table: str) -> int | None:
        with self._lock:
            ids = self.barriers[table]
            return ids[-1] if ids else None

    def live_orders(self) -> int:
        return int(self.state.o_alive.sum())


class GeneratorThread:
    """Runs ``generator.round()`` every ``interval_s`` in the background until stopped."""

    def __init__(self, generator: CdcGenerator, interval_s: float) -> None:
        self.generator = generator
        self.interval_s = interval_s
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dts-demo-cdc", daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                self.generator.round()
                self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))
        except BaseException as exc:  # surfaced by stop() / check()
            self.error = exc

    def start(self) -> GeneratorThread:
        self._thread.start()
        return self

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)
        self.check()
