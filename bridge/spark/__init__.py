"""Spark integration: the `dts` data source (both tiers), the sink, and atomic CTAS.

from bridge.spark import register, create_table_as
register(spark)
spark.read.format("dts").option("warehouse", W).load("db.table")
"""

from bridge.spark.ctas import create_table_as
from bridge.spark.register import register

__all__ = ["create_table_as", "register"]
