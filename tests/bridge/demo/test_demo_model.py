"""The demo's CDC generator and its derived-table oracle, without broker or Spark (fast).

The generator's change stream is applied to real FileStore tables (what the worker does
with it); the tables must then hold exactly the generator's source state.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bridge.demo.generator import CdcGenerator, RoundSizes
from bridge.demo.model import (
    CUSTOMERS,
    ORDERS,
    STATUSES,
    create_tables,
    expected_enriched,
    expected_totals,
    open_totals,
    same_rows,
    totals_from_enriched,
)
from filestore import Catalog


class RecordingWriter:
    """Stands in for a LogWriter: keeps each barrier's rows."""

    def __init__(self) -> None:
        self.pending: list[pa.Table] = []
        self.barriers: list[tuple[int, pa.Table | None]] = []
        self.next_id = 1000

    def write(self, table: pa.Table) -> int:
        self.pending.append(table)
        return table.num_rows

    def barrier(self) -> int:
        self.next_id += 1
        rows = pa.concat_tables(self.pending) if self.pending else None
        self.barriers.append((self.next_id, rows))
        self.pending = []
        return self.next_id


def _apply(table, writer: RecordingWriter) -> None:  # type: ignore[no-untyped-def]
    for barrier, rows in writer.barriers:
        w = table.new_write("test")
        if rows is not None:
            w.write(rows)
        w.commit(barrier=barrier)
        w.close()


def test_generator_stream_rebuilds_its_state_in_the_filestore(warehouse: Path) -> None:
    writers = {"orders": RecordingWriter(), "customers": RecordingWriter()}
    gen = CdcGenerator(writers, customers=12, initial_orders=30, sizes=RoundSizes(20, 10, 5, 3))
    gen.snapshot_initial()
    for _ in range(8):
        gen.round()
    assert gen.rounds == 9 and gen.barriers["orders"] == [b for b, _ in writers["orders"].barriers]
    kinds = pa.concat_tables(t for _, t in writers["orders"].barriers if t is not None)["_row_kind"]
    assert set(kinds.to_pylist()) == {"+I", "+U", "-D"}

    cat = Catalog(str(warehouse))
    create_tables(cat)
    _apply(cat.get_table(ORDERS), writers["orders"])
    _apply(cat.get_table(CUSTOMERS), writers["customers"])

    orders = cat.get_table(ORDERS).read().sort_by("order_id")
    st = gen.state
    live = np.flatnonzero(st.o_alive)
    assert orders["order_id"].to_numpy().tolist() == live.tolist()
    assert orders["amount_cents"].to_numpy().tolist() == st.o_amount[live].tolist()
    assert orders["status"].to_pylist() == [STATUSES[i] for i in st.o_status[live]]
    assert orders.num_rows == gen.live_orders() == 30 + 8 * (20 - 5)
    customers = cat.get_table(CUSTOMERS).read()
    assert customers.num_rows == 12
    # time travel: the initial load is still readable at its barrier
    first = gen.barriers["orders"][0]
    assert cat.get_table(ORDERS).read(barrier=first).num_rows == 30


def test_derived_oracles_agree_with_each_other() -> None:
    orders = pa.table(
        {
            "order_id": pa.array([1, 2, 3, 4, 5], pa.int64()),
            "customer_id": pa.array([7, 7, 8, 8, 9], pa.int64()),
            "status": ["paid", "cancelled", "placed", "shipped", "cancelled"],
            "amount_cents": pa.array([100, 900, 30_000, 6_000, 50], pa.int64()),
        }
    )
    enriched = expected_enriched(orders)
    assert enriched["order_id"].to_pylist() == [1, 3, 4]
    assert enriched["size"].to_pylist() == ["small", "large", "medium"]
    totals = expected_totals(orders)
    assert sorted(totals.to_pylist(), key=lambda r: r["customer_id"]) == [
        {"customer_id": 7, "open_orders": 1, "total_cents": 100},
        {"customer_id": 8, "open_orders": 2, "total_cents": 36_000},
    ]
    assert same_rows(totals_from_enriched(enriched), totals, "customer_id")
    # the streaming totals keep a zero row for a customer whose orders all went away
    with_zero = pa.concat_tables(
        [
            totals,
            pa.table({"customer_id": [9], "open_orders": [0], "total_cents": [0]}).cast(
                totals.schema
            ),
        ]
    )
    assert same_rows(totals, open_totals(with_zero), "customer_id")
    assert not same_rows(totals, with_zero, "customer_id")
    changed = totals.set_column(2, "total_cents", pc.add(totals["total_cents"], 1))
    assert not same_rows(totals, changed, "customer_id")


def test_row_diff_names_what_differs() -> None:
    from bridge.demo.model import row_diff

    a = pa.table({"k": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", None]})
    b = pa.table({"k": pa.array([2, 3, 4], pa.int64()), "v": ["x", None, "d"]})
    assert row_diff(a, a, "k") == ""
    assert row_diff(a, b, "k") == "1 missing, 1 extra, 1 differ (e.g. k 1, 4, 2)"
