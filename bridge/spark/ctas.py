"""Atomic CREATE TABLE AS SELECT (FLIP-305) and REPLACE TABLE AS SELECT for Spark.

`create_table_as(spark, name, df)` writes `df` with `format("dts")` and
`option("create", "true")`: the write goes through `bridge.spark.write.staged`, so a failed
job leaves no table and no file, and the table appears under its name in one rename.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bridge.spark.errors import OptionError
from bridge.spark.options.catalog import open_catalog
from bridge.spark.options.keys import session_defaults
from bridge.spark.registration import BY_NAME_CONF, expose, register
from bridge.spark.write.staged import table_exists

__all__ = ["create_table_as"]  # the public API (docs/reference)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def create_table_as(
    spark: SparkSession,
    name: str,
    df: Any,
    *,
    warehouse: str | None = None,
    primary_key: list[str] | None = None,
    partition_by: list[str] | None = None,
    options: dict[str, str] | None = None,
    if_not_exists: bool = False,
    replace: bool = False,
) -> bool:
    """Atomically create table `name` from `df` (or replace it); False when skipped.

    Nothing is visible until the whole job has written: a failed job leaves no table and
    no file, and a replaced table's readers see the old rows until the new ones appear.

    Args:
        spark: the session `df` belongs to.
        name: the table, `db.t` (`t` means `default.t`).
        df: the rows (a Spark DataFrame, batch).
        warehouse: the FileStore root; None: the Spark conf `spark.dts.warehouse`.
        primary_key: the primary key's columns (None: an append table).
        partition_by: the partition columns.
        options: table options, e.g. `{"bucket": "4"}`.
        if_not_exists: skip (return False) when the table exists.
        replace: replace an existing table's schema and rows (REPLACE TABLE AS SELECT).

    Returns:
        True when the table was created or replaced, False when skipped.

    Raises:
        OptionError: no warehouse is given or configured.
        TableAlreadyExists: the table exists and neither `if_not_exists` nor `replace`
            is set (raised by the job, as Spark reports a failed write).

    Example:
        >>> import bridge as dts
        >>> totals = spark.table("db.orders").groupBy("customer_id").sum("amount")
        >>> dts.create_table_as(spark, "db.totals", totals, primary_key=["customer_id"])
        True
    """
    warehouse = warehouse or spark.conf.get("spark.dts.warehouse", None)
    if not warehouse:
        raise OptionError("create_table_as needs warehouse= or the Spark conf spark.dts.warehouse")
    if "." not in name:
        name = f"default.{name}"
    if if_not_exists and not replace and table_exists(warehouse, name):
        return False
    register(spark)
    writer = (
        df.write.format("dts")
        .option("warehouse", warehouse)
        .option("create", "true")
        .option("replace", str(replace).lower())
        .option("if-not-exists", str(if_not_exists).lower())
    )
    if primary_key:
        writer = writer.option("primary-key", ",".join(primary_key))
    if partition_by:
        writer = writer.option("partition-by", ",".join(partition_by))
    for k, v in (options or {}).items():
        writer = writer.option(f"table.{k}", str(v))
    writer.mode("overwrite" if replace else "append").save(name)
    if spark.conf.get(BY_NAME_CONF, "false") == "true":
        expose(
            spark,
            open_catalog(warehouse).get_table(name),
            {**session_defaults(spark), "warehouse": warehouse},
        )
    return True
