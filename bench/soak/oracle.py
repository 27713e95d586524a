"""The final tables against the oracle, once the input has stopped: ``orders`` and
``customers`` must equal the source database's live rows, and the derived tables the
filter/join and the sums of those orders (``bench.pipeline.model.inconsistencies``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from bench.pipeline.model import CUSTOMERS, CUSTOMERS_SCHEMA, ORDERS, ORDERS_SCHEMA, TABLES
from bench.pipeline.model import inconsistencies as derived_problems
from bench.pipeline.source import OrdersDatabase
from bridge.demo.model import row_diff
from filestore import Catalog


@dataclass
class FinalCheck:
    ok: bool
    seconds: float  # until the tables agreed, or the timeout
    problems: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)


def expected_sources(db: OrdersDatabase) -> dict[str, pa.Table]:
    orders = db.live_rows().to_arrow().select(ORDERS_SCHEMA.names).cast(ORDERS_SCHEMA)
    customers = pa.table(
        {"customer_id": np.arange(db.customers, dtype=np.int64), "city": db.city}
    ).cast(CUSTOMERS_SCHEMA)
    return {ORDERS: orders, CUSTOMERS: customers}


def problems(catalog: Catalog, expected: dict[str, pa.Table]) -> tuple[list[str], dict[str, int]]:
    """What the tables at their latest snapshots get wrong ([] = they equal the oracle)."""
    data = {t: catalog.get_table(t).read() for t in (*TABLES, CUSTOMERS)}
    wrong = []
    for table, want in expected.items():
        diff = row_diff(want, data[table], want.schema.names[0])
        if diff:
            wrong.append(f"{table} != the source: {diff}")
    return wrong + derived_problems(data), {t: d.num_rows for t, d in data.items()}


def await_final(
    warehouse: str, db: OrdersDatabase, timeout_s: float, poll_s: float = 2.0
) -> FinalCheck:
    """Poll until the tables equal the oracle (the pipeline drains what is in flight) or
    ``timeout_s`` passes; the last problems found are the answer."""
    expected = expected_sources(db)
    started = time.monotonic()
    while True:
        try:
            wrong, rows = problems(Catalog(warehouse), expected)
        except Exception as exc:  # a read racing a commit: the next poll reads again
            wrong, rows = [f"read failed: {type(exc).__name__}: {str(exc)[:300]}"], {}
        elapsed = time.monotonic() - started
        if not wrong or elapsed > timeout_s:
            return FinalCheck(not wrong, elapsed, wrong, rows)
        time.sleep(poll_s)
