"""`register(spark)`: make `format("dts")` available in a SparkSession."""

from __future__ import annotations

from typing import Any

# Spark refuses a Python reader that implements pushFilters() unless this is on.
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> None:
    """Register the `dts` Python data source (idempotent) and enable Python filter pushdown."""
    from bridge.spark.source import DtsDataSource

    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    spark.dataSource.register(DtsDataSource)
