"""What every example shares: where the broker, the warehouse and the MetaService are,
and a fresh table to work on (re-running an example starts over)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

BOOTSTRAP = os.environ.get("DTS_BOOTSTRAP", "127.0.0.1:9092")
WAREHOUSE = os.environ.get("DTS_WAREHOUSE", str(Path("warehouse").resolve()))
META_URL = os.environ.get("DTS_META_URL") or None
#: Spark's Python workers must run this interpreter (the one with the project installed)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

ORDERS_SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        pa.field("customer_id", pa.int64(), nullable=False),
        pa.field("amount_cents", pa.int64()),
        pa.field("status", pa.string()),
    ]
)


def fresh_table(
    name: str, schema: pa.Schema, primary_key: list[str], options: dict[str, str]
) -> Any:
    """Create ``name`` in the warehouse, dropping an earlier example run's table and topic."""
    from bridge.tables import log_spec_for
    from filestore import Catalog
    from logstore.errors import BrokerUnreachableError
    from logstore.topics import delete_topic, ensure_reachable

    catalog = Catalog(WAREHOUSE)
    if catalog.table_exists(name):
        old = catalog.get_table(name)
        if old.options.change_tracking:
            try:  # an example that needs no broker must not wait on one to tidy up
                ensure_reachable(BOOTSTRAP, timeout_s=3)
                delete_topic(BOOTSTRAP, log_spec_for(old).topic)
            except BrokerUnreachableError:
                print(f"no broker at {BOOTSTRAP}: {name}'s old log topic is left as it is")
        catalog.drop_table(name)
    return catalog.create_table(name, schema, primary_key=primary_key, options=options)


def orders(rows: list[tuple[int, int, int, str]], kinds: list[str] | None = None) -> pa.Table:
    cols = list(zip(*rows, strict=True))
    data = {f.name: list(c) for f, c in zip(ORDERS_SCHEMA, cols, strict=True)}
    table = pa.table(data, schema=ORDERS_SCHEMA)
    if kinds is not None:
        table = table.append_column("_row_kind", pa.array(kinds, pa.string()))
    return table


def spark_session(name: str, *, kafka: bool = False) -> Any:
    """The session ``spark-submit`` made (its master, its --py-files), else a local Spark
    (one core, 127.0.0.1, errors only, scratch in a temp dir)."""
    if os.environ.get("PYSPARK_GATEWAY_PORT"):  # launched by spark-submit: keep its settings
        from pyspark.sql import SparkSession

        from bridge.spark import register

        spark = SparkSession.builder.appName(name).getOrCreate()
        register(spark)
        return spark
    import tempfile

    from bridge.spark.session import local_session

    work_dir = Path(tempfile.mkdtemp(prefix=f"dts-{name}-"))
    return local_session(name, work_dir, cores=1, kafka=kafka)
