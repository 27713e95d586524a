"""The benchmark's tables, its Debezium source shape and the oracle both pipelines are
checked against.

The demo's tables (``bridge.demo.model``) plus one column for freshness: every order
carries ``event_ms``, the wall-clock time its change was produced; each derived table
carries it on (``orders_enriched.event_ms``, ``customer_totals.last_event_ms`` = the
latest change of that customer's orders it has counted). A reader's freshness of a table
is then ``read time - max(event time visible)``, the same rule for both pipelines.

``customers`` is the dimension ``orders_enriched`` joins (its ``city``): a Debezium
snapshot (``op: r``) loaded before the first order, whose joined column never changes.
Both pipelines join it stream-static, the join Spark's streams have: each micro-batch of
order changes looks its customers up in the dimension's latest state. A dimension whose
joined columns change would need a regular (changelog) join, retracting the enriched rows
of every order of a changed customer; Spark's streams have none, so the benchmark does not
pretend either pipeline does it.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from bridge.demo import model as demo
from bridge.demo.model import LARGE_FROM, SMALL_BELOW

DB = "bench"
ORDERS = f"{DB}.orders"
CUSTOMERS = f"{DB}.customers"
ENRICHED = f"{DB}.orders_enriched"
TOTALS = f"{DB}.customer_totals"
TABLES = (ORDERS, ENRICHED, TOTALS)
#: per table, the column whose maximum is the latest source change it shows
EVENT_COLUMN = {ORDERS: "event_ms", ENRICHED: "event_ms", TOTALS: "last_event_ms"}

ORDERS_SCHEMA = pa.schema([*demo.ORDERS_SCHEMA, pa.field("event_ms", pa.int64())])
CUSTOMERS_SCHEMA = pa.schema(
    [pa.field("customer_id", pa.int64(), nullable=False), pa.field("city", pa.string())]
)
ENRICHED_SCHEMA = pa.schema(
    [*ORDERS_SCHEMA, pa.field("size", pa.string()), pa.field("city", pa.string())]
)
TOTALS_SCHEMA = pa.schema(
    [
        pa.field("customer_id", pa.int64(), nullable=False),
        pa.field("open_orders", pa.int64()),
        pa.field("total_cents", pa.int64()),
        pa.field("last_event_ms", pa.int64()),
    ]
)
SCHEMAS = {
    ORDERS: ORDERS_SCHEMA,
    CUSTOMERS: CUSTOMERS_SCHEMA,
    ENRICHED: ENRICHED_SCHEMA,
    TOTALS: TOTALS_SCHEMA,
}
KEYS = {ORDERS: "order_id", CUSTOMERS: "customer_id", ENRICHED: "order_id", TOTALS: "customer_id"}
#: the stitched side's commit tag of a micro-batch's writes (``commitInfo.userMetadata``),
#: by which its reader picks the versions one batch wrote
BATCH_TAG = "batch "
#: what a consistency check reads together: the measured tables and the dimension
READ_TOGETHER = (*TABLES, CUSTOMERS)


def spark_size(F: Any) -> Any:
    """The size band as a Spark column (small / medium / large by amount)."""
    return (
        F.when(F.col("amount_cents") < SMALL_BELOW, "small")
        .when(F.col("amount_cents") >= LARGE_FROM, "large")
        .otherwise("medium")
    )


# ---- the oracle: what the derived tables must hold for a state of orders ----------------


def expected_enriched(orders: pa.Table, customers: pa.Table) -> pa.Table:
    """The orders not cancelled, with their size band and their customer's city (an order
    whose customer is unknown has no enriched row: an inner join)."""
    filtered = pa.schema([f for f in ENRICHED_SCHEMA if f.name != "city"])
    kept = demo.expected_enriched(orders, filtered)
    joined = kept.join(customers.select(["customer_id", "city"]), "customer_id", join_type="inner")
    return joined.select(ENRICHED_SCHEMA.names).cast(ENRICHED_SCHEMA)


def inconsistencies(data: dict[str, pa.Table]) -> list[str]:
    """What a read of the tables "together" gets wrong ([] = consistent): the derived tables
    must equal the filter/join and the per-customer sums of the orders read."""
    orders, enriched, totals = (data[t] for t in TABLES)
    wrong = []
    if not demo.same_rows(expected_enriched(orders, data[CUSTOMERS]), enriched, "order_id"):
        wrong.append(f"{ENRICHED} != filter/join of {ORDERS} and {CUSTOMERS}")
    if not demo.same_rows(demo.expected_totals(orders), demo.open_totals(totals), "customer_id"):
        wrong.append(f"{TOTALS} != per-customer sums of {ORDERS}")
    return wrong


def latest_events(data: dict[str, pa.Table]) -> dict[str, int | None]:
    """Per table, the latest source change (event ms) it shows."""
    out: dict[str, int | None] = {}
    for table, column in EVENT_COLUMN.items():
        value = pc.max(data[table][column]).as_py() if data[table].num_rows else None
        out[table] = int(value) if value is not None else None
    return out
