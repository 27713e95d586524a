"""Spark integration: the `dts` data source (both tiers), the sink, and atomic CTAS.

from bridge.spark import register, create_table_as
register(spark)
spark.read.format("dts").option("warehouse", W).load("db.table")

The exports are imported lazily: Spark's Python workers import this package before
any of its modules, and a worker reading a scan needs neither CTAS nor registration.

Imports within bridge: bridge.arrow_pool, bridge.errors, bridge.lazy_exports, bridge.meta, bridge.tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.lazy_exports import lazy_exports

if TYPE_CHECKING:  # for type checkers: the names below, without importing them at run time
    from bridge.spark.ctas import create_table_as as create_table_as
    from bridge.spark.registration import register as register

_EXPORTS = {"create_table_as": "bridge.spark.ctas", "register": "bridge.spark.registration"}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
