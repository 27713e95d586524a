"""The demo's tables: two CDC sources, two derived tables, and what the derived ones must hold.

The derived tables are defined twice on purpose: once as Spark streaming transforms
(what the pipeline runs) and once over Arrow (the oracle that checks them against the
source read at the same barrier). Amounts are integer cents so sums compare exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from filestore import Catalog
from filestore.format.row_kind import ROW_KIND_COLUMN
from logstore.spec import BARRIER_COLUMN

DB = "demo"
CUSTOMERS = f"{DB}.customers"
ORDERS = f"{DB}.orders"
ENRICHED = f"{DB}.orders_enriched"
TOTALS = f"{DB}.customer_totals"
CTAS_TABLE = f"{DB}.top_customers"
CTAS_FAILED = f"{DB}.never_visible"
SOURCES = (ORDERS, CUSTOMERS)
DERIVED = (ENRICHED, TOTALS)

STATUSES = ("placed", "paid", "shipped", "cancelled")
TIERS = ("bronze", "silver", "gold")
CITIES = ("Lisbon", "Oslo", "Lima", "Osaka", "Accra", "Quito")
# orders_enriched.size: small below SMALL_BELOW cents, large from LARGE_FROM cents
SMALL_BELOW = 5_000
LARGE_FROM = 20_000

CUSTOMERS_SCHEMA = pa.schema(
    [
        pa.field("customer_id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("tier", pa.string()),
        pa.field("city", pa.string()),
    ]
)
ORDERS_SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        pa.field("customer_id", pa.int64()),
        pa.field("status", pa.string()),
        pa.field("amount_cents", pa.int64()),
    ]
)
ENRICHED_SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        pa.field("customer_id", pa.int64()),
        pa.field("status", pa.string()),
        pa.field("amount_cents", pa.int64()),
        pa.field("size", pa.string()),
    ]
)
TOTALS_SCHEMA = pa.schema(
    [
        pa.field("customer_id", pa.int64(), nullable=False),
        pa.field("open_orders", pa.int64()),
        pa.field("total_cents", pa.int64()),
    ]
)

# Sources keep every snapshot for the demo's lifetime so time travel reaches the first one.
_SOURCE_OPTIONS = {"snapshot.num-retained.min": "100000", "snapshot.time-retained": "1 d"}
# Derived tables are written by Spark to the FileStore tier only: no log to feed.
_DERIVED_OPTIONS = {"change-tracking": "false", "bucket": "2"}


@dataclass(frozen=True)
class TableDef:
    name: str
    schema: pa.Schema
    primary_key: list[str]
    options: dict[str, str]
    role: str


TABLES = (
    TableDef(CUSTOMERS, CUSTOMERS_SCHEMA, ["customer_id"], {"bucket": "2", **_SOURCE_OPTIONS},
             "source (CDC)"),
    TableDef(ORDERS, ORDERS_SCHEMA, ["order_id"], {"bucket": "4", **_SOURCE_OPTIONS},
             "source (CDC)"),
    TableDef(ENRICHED, ENRICHED_SCHEMA, ["order_id"], dict(_DERIVED_OPTIONS),
             "derived: orders not cancelled, with a size band"),
    TableDef(TOTALS, TOTALS_SCHEMA, ["customer_id"], dict(_DERIVED_OPTIONS),
             "derived: open orders and total per customer"),
)  # fmt: skip


def create_tables(catalog: Catalog) -> None:
    """Create the demo database and its four tables in ``catalog`` (a filestore Catalog)."""
    if DB not in catalog.list_databases():
        catalog.create_database(DB)
    for t in TABLES:
        catalog.create_table(t.name, t.schema, primary_key=t.primary_key, options=t.options)


# ---- the derived tables as Spark streaming transforms ------------------------------------


def spark_enriched(orders: Any) -> Any:
    """orders (a streaming DataFrame with `_row_kind`, `_barrier`) -> orders_enriched rows.

    A filter and a projection keep each change's row kind, so the upserting sink
    applies retractions too (an order that becomes cancelled is deleted downstream).
    ``coalesce(1)``: one sink task, one file per bucket and micro-batch. Not for order:
    the sink numbers every task's rows by their barrier, so a key's later change wins in
    whichever task it is (``bridge.spark.write._tasks.barrier_sequence_numbers``). For cost:
    without it, the pipeline benchmark's log-tier micro-batches took ~30% longer (four
    sink tasks, each a Python writer and its files, on two busy cores).
    """
    # pyspark only where Spark runs: the Arrow oracle and create_tables do without it
    from pyspark.sql import functions as F

    size = (
        F.when(F.col("amount_cents") < SMALL_BELOW, "small")
        .when(F.col("amount_cents") >= LARGE_FROM, "large")
        .otherwise("medium")
    )
    return (
        orders.where(F.col("status") != "cancelled")
        .select(
            "order_id", "customer_id", "status", "amount_cents", size.alias("size"),
            ROW_KIND_COLUMN, BARRIER_COLUMN,
        )
        .coalesce(1)
    )  # fmt: skip


def spark_totals(orders: Any, *more: Any) -> Any:
    """orders changes -> per-customer totals (complete output mode, upserted by the sink).

    Retractions (-U, -D) count negatively, so the running sums equal the aggregate
    of the source's current state; a customer whose orders are all gone keeps a row
    with zero open orders. ``more``: further aggregate columns (the pipeline benchmark's
    latest event time).
    """
    from pyspark.sql import functions as F

    sign = F.when(F.col(ROW_KIND_COLUMN).isin("-U", "-D"), F.lit(-1)).otherwise(F.lit(1))
    return (
        orders.where(F.col("status") != "cancelled")
        .groupBy("customer_id")
        .agg(
            F.sum(sign).cast("long").alias("open_orders"),
            F.sum(sign * F.col("amount_cents")).cast("long").alias("total_cents"),
            *more,
        )
    )


# ---- the same definitions over Arrow: the oracle -----------------------------------------


def expected_enriched(orders: pa.Table, schema: pa.Schema = ENRICHED_SCHEMA) -> pa.Table:
    """What orders_enriched (``schema``: the orders' columns it keeps, and ``size``) must
    hold for this state of orders."""
    kept = orders.filter(pc.not_equal(orders["status"], "cancelled"))
    amount = kept["amount_cents"]
    size = pc.if_else(
        pc.less(amount, SMALL_BELOW),
        "small",
        pc.if_else(pc.greater_equal(amount, LARGE_FROM), "large", "medium"),
    )
    cols = [n for n in schema.names if n != "size"]
    return kept.select(cols).append_column("size", size).select(schema.names).cast(schema)


def expected_totals(orders: pa.Table) -> pa.Table:
    """What customer_totals must hold (its rows with open orders) for this state of orders."""
    kept = orders.filter(pc.not_equal(orders["status"], "cancelled"))
    agg = kept.group_by("customer_id").aggregate([("order_id", "count"), ("amount_cents", "sum")])
    return pa.table(
        {
            "customer_id": agg["customer_id"],
            "open_orders": agg["order_id_count"],
            "total_cents": agg["amount_cents_sum"],
        }
    ).cast(TOTALS_SCHEMA)


def totals_from_enriched(enriched: pa.Table) -> pa.Table:
    """customer_totals recomputed from orders_enriched: the two derived tables must agree."""
    agg = enriched.group_by("customer_id").aggregate(
        [("order_id", "count"), ("amount_cents", "sum")]
    )
    return pa.table(
        {
            "customer_id": agg["customer_id"],
            "open_orders": agg["order_id_count"],
            "total_cents": agg["amount_cents_sum"],
        }
    ).cast(TOTALS_SCHEMA)


def open_totals(totals: pa.Table) -> pa.Table:
    """customer_totals without the zero rows of customers who have no open order left."""
    return totals.filter(pc.greater(totals["open_orders"], 0)).select(TOTALS_SCHEMA.names)


def same_rows(a: pa.Table, b: pa.Table, key: str) -> bool:
    """Equal as sets of rows (order-insensitive), over a's columns."""
    cols = a.schema.names
    left = a.select(cols).sort_by(key)
    right = b.select(cols).cast(a.select(cols).schema).sort_by(key)
    return bool(left.equals(right))


def row_diff(expected: pa.Table, actual: pa.Table, key: str) -> str:
    """What differs between two tables keyed by ``key``: counts and a few keys ("" if equal)."""
    if same_rows(expected, actual, key):
        return ""
    cols = expected.schema.names
    exp = expected.select(cols)
    act = actual.select(cols).cast(exp.schema)
    exp_keys, act_keys = exp[key], act[key]
    missing = pc.filter(exp_keys, pc.invert(pc.is_in(exp_keys, act_keys)))
    extra = pc.filter(act_keys, pc.invert(pc.is_in(act_keys, exp_keys)))
    both = exp.join(act, key, join_type="inner", right_suffix="_actual")
    differs = pc.not_equal(both[key], both[key]) if both.num_rows else None  # all false
    for c in cols:
        if c == key or differs is None:
            continue
        ne = pc.fill_null(pc.not_equal(both[c], both[f"{c}_actual"]), True)
        same_null = pc.and_(pc.is_null(both[c]), pc.is_null(both[f"{c}_actual"]))
        differs = pc.or_(differs, pc.and_not(ne, same_null))
    changed = both.filter(differs)[key] if differs is not None else pa.array([], exp_keys.type)
    sample = [*missing[:3].to_pylist(), *extra[:3].to_pylist(), *changed[:3].to_pylist()]
    return (
        f"{len(missing)} missing, {len(extra)} extra, {len(changed)} differ "
        f"(e.g. {key} {', '.join(map(str, sample))})"
    )
