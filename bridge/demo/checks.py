"""The demo's queries and what they prove: consistent reads, time travel, atomic CTAS."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from bridge.consistency_read import consistent_read, consistent_read_tables
from bridge.demo.model import (
    CTAS_FAILED,
    CTAS_TABLE,
    CUSTOMERS,
    DB,
    ENRICHED,
    ORDERS,
    TOTALS,
    expected_enriched,
    expected_totals,
    open_totals,
    row_diff,
    totals_from_enriched,
)
from bridge.meta.errors import MetaError
from bridge.meta.versions import ConsistencyModeName
from filestore import Catalog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

READ_TABLES = (ORDERS, ENRICHED, TOTALS)


@dataclass
class ReadCheck:
    """One consistent read of orders and its two derived tables, checked against each other."""

    mode: ConsistencyModeName
    barrier: int | None = None
    versions: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    checks: list[tuple[str, bool]] = field(default_factory=list)
    error: str | None = None
    engine: str = "Spark"
    details: list[str] = field(default_factory=list)  # how a failed check differs

    @property
    def agreed(self) -> bool:
        return self.error is None and bool(self.checks) and all(ok for _, ok in self.checks)

    @property
    def same_barrier(self) -> bool:
        return len({b for b, _ in self.versions.values()}) == 1


def check_read(
    spark: SparkSession | None,
    catalog: Catalog,
    warehouse: str,
    meta_url: str,
    mode: ConsistencyModeName,
) -> ReadCheck:
    """Read orders, orders_enriched and customer_totals together (``mode`` strong or weak)
    through the MetaService; with ``spark`` as DataFrames, else through the FileStore API."""
    check = ReadCheck(mode, engine="Spark" if spark is not None else "FileStore API")
    try:
        if spark is not None:
            frames = consistent_read(
                spark, list(READ_TABLES), warehouse=warehouse, meta_url=meta_url, mode=mode
            )
            data = {t: df.toArrow() for t, df in frames.items()}
            version = frames.version
        else:
            tables = consistent_read_tables(
                catalog, list(READ_TABLES), meta_url=meta_url, mode=mode
            )
            data, version = dict(tables), tables.version
    except MetaError as e:
        check.error = str(e)
        return check
    check.barrier = version.barrier
    check.versions = {v.table: (v.barrier, v.snapshot_id) for v in version.tables if v.listed}
    check.rows = {t: d.num_rows for t, d in data.items()}
    orders, enriched, totals = (data[t] for t in READ_TABLES)
    pairs = [
        (f"{ENRICHED} = orders not cancelled, with size", expected_enriched(orders), enriched,
         "order_id"),
        (f"{TOTALS} = per-customer sums of {ORDERS}", expected_totals(orders), open_totals(totals),
         "customer_id"),
        (f"{TOTALS} = per-customer sums of {ENRICHED}", totals_from_enriched(enriched),
         open_totals(totals), "customer_id"),
    ]  # fmt: skip
    for what, expected, actual, key in pairs:
        diff = row_diff(expected, actual, key)
        check.checks.append((what, not diff))
        if diff:
            check.details.append(f"{what}: {diff}")
    return check


@dataclass
class TimeTravel:
    customers_barrier: int
    orders_barrier: int
    changed: pa.Table  # customer_id, name, tier/city then and now
    customers: int
    orders_then: int
    orders_now: int


def time_travel(
    spark: SparkSession,
    catalog: Catalog,
    warehouse: str,
    orders_barrier: int,
    customers_barrier: int,
) -> TimeTravel:
    """customers as of their first barrier (Spark, option barrier) next to now; orders' counts."""

    def read(name: str, **opts: Any) -> pa.Table:
        reader = spark.read.format("dts").option("warehouse", warehouse)
        for k, v in opts.items():
            reader = reader.option(k, str(v))
        return reader.load(name).toArrow()

    then = read(CUSTOMERS, barrier=customers_barrier)
    now = read(CUSTOMERS)
    cols = ["customer_id", "tier", "city"]
    joined = then.select(["customer_id", "name", "tier", "city"]).join(
        now.select(cols), "customer_id", left_suffix="_then", right_suffix="_now"
    )
    moved = pc.or_(
        pc.not_equal(joined["tier_then"], joined["tier_now"]),
        pc.not_equal(joined["city_then"], joined["city_now"]),
    )
    changed = joined.filter(moved).sort_by("customer_id")
    orders = catalog.get_table(ORDERS)
    return TimeTravel(
        customers_barrier=customers_barrier,
        orders_barrier=orders_barrier,
        changed=changed.select(
            ["customer_id", "name", "tier_then", "tier_now", "city_then", "city_now"]
        ),
        customers=now.num_rows,
        orders_then=orders.read(barrier=orders_barrier, columns=["order_id"]).num_rows,
        orders_now=orders.read(columns=["order_id"]).num_rows,
    )


@dataclass
class CtasOutcome:
    table: str
    rows: pa.Table
    snapshots: int
    seconds: float
    failed_table: str
    failed_error: str
    failed_visible: bool
    staging_left: list[str]

    @property
    def atomic(self) -> bool:
        return self.snapshots == 1 and not self.failed_visible and not self.staging_left


def run_ctas(
    spark: SparkSession, catalog: Catalog, warehouse: str, strong: ReadCheck
) -> CtasOutcome:
    """CREATE TABLE top_customers AS SELECT (totals at the strong barrier x customers), and a
    CTAS whose tasks fail: that table never becomes visible and leaves nothing behind."""
    # pyspark (and bridge.spark, which loads it) only where Spark runs
    from pyspark.sql import functions as F

    from bridge.spark import create_table_as

    reader = spark.read.format("dts").option("warehouse", warehouse)
    snapshot = strong.versions.get(TOTALS, (None, None))[1]
    if snapshot is not None:
        reader = reader.option("snapshot-id", str(snapshot))
    totals = reader.load(TOTALS)
    customers = spark.read.format("dts").option("warehouse", warehouse).load(CUSTOMERS)
    top = (
        totals.where(F.col("open_orders") > 0)
        .join(customers, "customer_id")
        .orderBy(F.desc("total_cents"), "customer_id")
        .limit(5)
        .select("customer_id", "name", "tier", "open_orders", "total_cents")
    )
    started = time.monotonic()
    create_table_as(
        spark, CTAS_TABLE, top, warehouse=warehouse, primary_key=["customer_id"],
        options={"bucket": "1"},
    )  # fmt: skip
    seconds = time.monotonic() - started
    table = catalog.get_table(CTAS_TABLE)
    rows = table.read().sort_by([("total_cents", "descending"), ("customer_id", "ascending")])

    failing = top.withColumn(
        "total_cents",
        F.col("total_cents")
        + F.when(F.col("total_cents") < 0, F.lit(0)).otherwise(
            F.raise_error(F.lit("demo: a task fails halfway through the CTAS"))
        ),
    )
    error = ""
    # Spark logs a deliberate task failure as ERRORs with ~100 lines of Java stack traces
    # (executor, task set manager, writer); the demo reports it as one line instead
    spark.sparkContext.setLogLevel("OFF")
    try:
        create_table_as(
            spark, CTAS_FAILED, failing, warehouse=warehouse, primary_key=["customer_id"]
        )
    except Exception as e:  # Spark reports the task failure; the point is what is left
        text = str(e)
        error = "demo: a task fails halfway" if "a task fails halfway" in text else text[:200]
    finally:
        spark.sparkContext.setLogLevel("ERROR")  # the level local_session runs at
    return CtasOutcome(
        table=CTAS_TABLE,
        rows=rows,
        snapshots=len(table.snapshots()),
        seconds=seconds,
        failed_table=CTAS_FAILED,
        failed_error=error or "(it did not fail)",
        failed_visible=CTAS_FAILED in catalog.list_tables(DB),
        staging_left=_staging_left(warehouse, CTAS_FAILED),
    )


def _staging_left(warehouse: str, name: str) -> list[str]:
    staging = Path(warehouse) / "_staging"
    if not staging.is_dir():
        return []
    return sorted(p.name for p in staging.iterdir() if p.name.startswith(name))
