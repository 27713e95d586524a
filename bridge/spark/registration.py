"""`register(spark)`: make `format("dts")` available, and the warehouse's tables usable by name.

Session confs `spark.dts.warehouse`, `spark.dts.bootstrap`, `spark.dts.meta.url` and
`spark.dts.meta.ca-file` become defaults of every read and write: a Python data source runs in Python
workers that cannot see the session's conf, so the defaults are baked into the
registered source class (cloudpickle ships a class made at run time by value).

Tables by name: Spark hands a catalog table's Python data source no options at all
(neither the table name nor `OPTIONS (...)`), so `register(spark, warehouse=W)` /
`refresh(spark)` registers one source per FileStore table (`dts.<db>.<table>`, its
warehouse and name baked in) and a Spark catalog table `<db>.<table>` using it. Then
`spark.table("db.t")`, `SELECT ... FROM db.t`, `INSERT INTO / INSERT OVERWRITE db.t` and
`df.write.format("dts").mode("append").saveAsTable("db.t")` work; every read sees
the table's latest snapshot, because the source plans each scan afresh. In a session
built with the dts extension (`extension.py`), reads by name are planned like
`dts.table(spark, "db.t")`: Spark's own Parquet reader for splits that need no merge.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import bridge
import filestore
import logstore
from bridge.spark._warm_up import wants_warm_up
from bridge.spark._warm_up import warm_up as run_warm_up
from bridge.spark.errors import OptionError, SparkBridgeError
from bridge.spark.native.extension import TABLE_WAREHOUSE_CONF, install_planner
from bridge.spark.options.catalog import open_catalog
from bridge.spark.options.keys import SESSION_CONF_PREFIX, session_defaults
from bridge.spark.options.schema import spark_schema
from bridge.spark.source import DtsDataSource

__all__ = ["refresh", "register"]  # the public API (docs/reference)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from filestore import Table

# Spark refuses a Python reader that implements pushFilters() unless this is on.
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
TABLE_SOURCE_PREFIX = "dts."
# set by register(spark, warehouse=W): create_table_as then exposes the new table by name
BY_NAME_CONF = "spark.dts.tables-by-name"
# the Spark tables this module created (Spark's catalog does not show a Python source's
# provider), so refresh never touches a user's own table of the same name
EXPOSED_CONF = "spark.dts.exposed-tables"
_PACKAGES = (bridge, filestore, logstore)


def source_class(name: str, defaults: dict[str, str]) -> type:
    """A `DtsDataSource` subclass registered as `name` with these option defaults."""
    attrs = {
        "defaults": dict(defaults),
        "name": classmethod(lambda cls: name),
        "__module__": __name__,  # not importable by this name: pickled by value
    }
    return type(f"DtsSource_{abs(hash(name))}", (DtsDataSource,), attrs)


def register(
    spark: SparkSession,
    warehouse: str | None = None,
    *,
    bootstrap: str | None = None,
    meta_url: str | None = None,
    meta_ca_file: str | None = None,
    warm_up: bool | None = None,
) -> list[str]:
    """Register the `dts` data source (idempotent); with a warehouse, its tables by name.

    Given values are stored as the session confs `spark.dts.*` (the defaults of every
    read and write). With a warehouse (given or from `spark.dts.warehouse` when given
    here) every table in it becomes a Spark table `db.t`; returns their names.
    `warm_up=True` (or the conf `spark.dts.warm-up=true`) scans a tiny Parquet file first,
    so the session's first query runs at warm speed (local sessions; see `_warm_up.py`).

    Args:
        spark: the session to register in.
        warehouse: the FileStore root (a local path or a pyarrow URI); None keeps the
            session's `spark.dts.warehouse` as the default and registers no table names.
        bootstrap: Kafka's bootstrap servers, the default of the log and hybrid tiers.
        meta_url: the MetaService's URL: jobs are registered, strong reads resolved there.
        meta_ca_file: the CA file an https MetaService is verified with (default: env
            `DTS_META_CA_FILE`, else the system trust store).
        warm_up: scan a tiny file now (None: the conf `spark.dts.warm-up` decides).

    Returns:
        The names (`db.t`) of the warehouse's tables now readable by name; empty without
        a warehouse.

    Example:
        >>> import bridge as dts
        >>> dts.register(spark, warehouse="/data/warehouse")
        ['db.orders', 'db.customers']
        >>> spark.read.format("dts").load("db.orders").count()
        1000
    """
    given = {
        "warehouse": warehouse,
        "bootstrap": bootstrap,
        "meta.url": meta_url,
        "meta.ca-file": meta_ca_file,
    }
    for key, value in given.items():
        if value:
            spark.conf.set(SESSION_CONF_PREFIX + key, value)
    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    share_import_roots(spark.sparkContext)
    spark.dataSource.register(source_class("dts", session_defaults(spark)))
    install_planner(spark)
    if wants_warm_up(spark, warm_up):
        run_warm_up(spark)
    if not warehouse:
        return []
    spark.conf.set(BY_NAME_CONF, "true")
    return refresh(spark)


def share_import_roots(sc: Any) -> None:
    """Let every Python worker import the packages from where this driver imported them.

    Spark hands ``--py-files`` / ``spark.submit.pyFiles`` to the workers that run tasks
    and plan batch reads, but not to the driver's streaming source runner
    (``python_streaming_source_runner``), which then cannot import ``bridge``. The
    functions registered after this carry ``sc.environment`` as their workers'
    environment, so its ``PYTHONPATH`` names the roots (the shipped zip, or the
    checkout) the driver's own imports came from. A root absent on an executor's host
    is skipped by Python; executors get the shipped files as before.
    """
    roots = [str(Path(m.__file__ or "").resolve().parents[1]) for m in _PACKAGES]
    current = [p for p in sc.environment.get("PYTHONPATH", "").split(os.pathsep) if p]
    sc.environment["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*current, *roots]))


def refresh(spark: SparkSession, warehouse: str | None = None) -> list[str]:
    """Make every table of the warehouse a Spark table by name (new ones, changed schemas).

    Call it after creating tables outside this session (a worker, another job);
    `dts.create_table_as` calls it for you. Catalog entries of tables that no longer
    exist in the warehouse are dropped.

    Args:
        spark: a session `register` ran in.
        warehouse: the FileStore root; None: the session's `spark.dts.warehouse`.

    Returns:
        The table names (`db.t`) of the warehouse.

    Raises:
        OptionError: neither `warehouse` nor the conf `spark.dts.warehouse` is set.

    Example:
        >>> dts.refresh(spark)  # after a worker created db.payments
        ['db.customers', 'db.orders', 'db.payments']
    """
    defaults = session_defaults(spark)
    warehouse = warehouse or defaults.get("warehouse")
    if not warehouse:
        raise OptionError("refresh needs warehouse= or the Spark conf spark.dts.warehouse")
    cat = open_catalog(warehouse)
    names = cat.list_tables()
    for name in names:
        expose(spark, cat.get_table(name), {**defaults, "warehouse": warehouse})
    _drop_vanished(spark, set(names))
    return names


def expose(spark: SparkSession, table: Table, defaults: dict[str, str]) -> None:
    """Register `table`'s own source and (re)create its Spark catalog table `db.t`."""
    name = table.name
    provider = TABLE_SOURCE_PREFIX + name
    spark.dataSource.register(source_class(provider, {**defaults, "path": name}))
    db, short = name.split(".", 1)
    schema = spark_schema(table.schema.arrow_schema, metadata_columns=False)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{db}`")
    spark.conf.set(TABLE_WAREHOUSE_CONF + name, defaults["warehouse"])
    exposed = _exposed(spark)
    if spark.catalog.tableExists(f"{db}.{short}"):
        if name not in exposed:
            raise SparkBridgeError(
                f"Spark table {name} already exists and is not the dts table {name}; "
                "drop or rename it to read the dts table by name"
            )
        columns = [(c.name, c.dataType) for c in spark.catalog.listColumns(f"{db}.{short}")]
        if columns == [(f.name, f.dataType.simpleString()) for f in schema.fields]:
            return
        spark.sql(f"DROP TABLE `{db}`.`{short}`")  # the schema evolved: re-create
    spark.catalog.createTable(f"{db}.{short}", source=provider, schema=schema)
    spark.conf.set(EXPOSED_CONF, ",".join(sorted({*exposed, name})))


def _exposed(spark: SparkSession) -> set[str]:
    raw = spark.conf.get(EXPOSED_CONF, "") or ""
    return {n for n in raw.split(",") if n}


def _drop_vanished(spark: SparkSession, names: set[str]) -> None:
    """Drop the Spark tables this module made for tables no longer in the warehouse."""
    exposed = _exposed(spark)
    for name in sorted(exposed - names):
        db, short = name.split(".", 1)
        spark.sql(f"DROP TABLE IF EXISTS `{db}`.`{short}`")
        spark.conf.unset(TABLE_WAREHOUSE_CONF + name)
    spark.conf.set(EXPOSED_CONF, ",".join(sorted(exposed & names)))
