"""Native reads by name: the dts Spark extension (a small JVM rule) and its Python planner.

A Python data source cannot hand Spark a plan: whatever reads `spark.table("db.t")`
through it runs in Python workers, with every column (PySpark 4.2's Python data
source API has no column pruning). The extension `io.dts.spark.DtsExtensions`
(`jvm/src`, built by `make spark-ext` into the cache) adds one analyzer rule: a read of
a catalog table backed by a per-table dts source is replaced by the plan of
`dts.table(spark, "db.t")`, which this module's planner builds in the driver's Python
process, called back through Py4J while Spark analyzes the query. Splits that need no
merge are then read by Spark's own Parquet reader (pruned columns and pushed filters
in `explain()`); each query plans the latest snapshot. Writes by name are untouched.
A second rule, after Spark's column pruning, re-plans a `dts` source read that needs
fewer columns with the `columns` option (`TablePlanner.prune`): the Python source and
the Arrow hand-off to the JVM then carry only those columns.

Without the extension (a session built without it) reads by name still work, through
the Python source.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from bridge.spark.errors import ExtensionJarMissing
from bridge.spark.native._stream import NATIVE_STREAMS_CONF, NativeStreams
from bridge.spark.native.scan import changes as native_changes
from bridge.spark.native.scan import table as native_table
from bridge.spark.options import ReadOptions
from bridge.spark.options.catalog import open_table
from bridge.spark.options.keys import session_defaults
from logstore.localhost import cache_dir

__all__ = ["extension_conf"]  # the public API (docs/reference)

log = logging.getLogger(__name__)

EXTENSION_CLASS = "io.dts.spark.DtsExtensions"
EXTENSIONS_CONF = "spark.sql.extensions"
# the warehouse of each table exposed by name (refresh may be given another warehouse)
TABLE_WAREHOUSE_CONF = "spark.dts.table-warehouse."


def extension_jar() -> Path:
    """The extension jar for the installed PySpark (`DTS_SPARK_EXT_JAR` overrides)."""
    import pyspark

    given = os.environ.get("DTS_SPARK_EXT_JAR")
    if given:
        return Path(given)
    return cache_dir() / f"dts-spark-ext-{pyspark.__version__}" / "dts-spark-ext.jar"


def extension_conf() -> dict[str, str]:
    """The session confs that load the extension: give them to `SparkSession.builder`.

    With them, a read of a warehouse table by name (`spark.table("db.t")`, SQL) is planned
    by the extension: splits that need no merge are read by Spark's own Parquet reader.

    Returns:
        `spark.jars` (the extension's jar) and `spark.sql.extensions`.

    Raises:
        ExtensionJarMissing: the jar is not built; it names the make target.

    Example:
        >>> import bridge as dts
        >>> builder = SparkSession.builder
        >>> for key, value in dts.extension_conf().items():
        ...     builder = builder.config(key, value)
        >>> spark = builder.getOrCreate()
        >>> dts.register(spark, warehouse="/data/warehouse")
    """
    jar = extension_jar()
    if not jar.is_file():
        raise ExtensionJarMissing(
            f"the dts Spark extension is not built at {jar}: run `make spark-ext` (part of "
            "`make test` and `make demo`), or set DTS_SPARK_EXT_JAR to the jar's path"
        )
    return {"spark.jars": str(jar), EXTENSIONS_CONF: EXTENSION_CLASS}


def extension_loaded(spark: Any) -> bool:
    """Whether this session was built with the dts extension."""
    configured = spark.conf.get(EXTENSIONS_CONF, "") or ""
    return EXTENSION_CLASS in [c.strip() for c in configured.split(",")]


class TablePlanner:
    """Implements the JVM interface `io.dts.spark.TablePlanner` for one session."""

    def __init__(self, spark: Any) -> None:
        self._spark = spark
        self._streams = NativeStreams(spark)

    def plan(self, name: str) -> Any:
        """The analyzed plan of `dts.table(spark, name)`, or None to keep the Python source
        (not a table exposed here, or planning failed: that read then reports the error)."""
        warehouse = self._spark.conf.get(TABLE_WAREHOUSE_CONF + name, None)
        if not warehouse:
            return None
        try:
            df = native_table(self._spark, name, warehouse=warehouse)
            return df._jdf.queryExecution().analyzed()
        except Exception:
            log.warning("native read of %s fell back to the Python source", name, exc_info=True)
            return None

    def prune(self, options: Any, columns: str) -> Any:
        """The analyzed plan of the `dts` read with `options` narrowed to `columns` (table
        columns among them; none -> the first key column, for `count(*)`), or None to keep
        the read as it is (which then raises any error in it clearly)."""
        given = {str(k): str(v) for k, v in options.items()}
        try:
            opts = ReadOptions.parse({**session_defaults(self._spark), **given})
            table = open_table(opts.common.warehouse, opts.common.table)
            names = table.schema.arrow_schema.names
            keep = [c for c in columns.split(",") if c in names]
            if not keep:
                keep = [(table.primary_key or names)[0]]
            reader = self._spark.read.format("dts").options(**given)
            df = reader.option("columns", ",".join(keep)).load()
            return df._jdf.queryExecution().analyzed()
        except Exception:
            log.warning("column pruning of a dts read was skipped", exc_info=True)
            return None

    def nativeRead(self, options: Any) -> Any:
        """The analyzed plan of a `format("dts")` batch read as Spark's own scans (a
        changes read of stored changelog files: `native.changes`), or None to keep the
        Python source (which then reports any error in the read itself)."""
        given = {str(k): str(v) for k, v in options.items()}
        try:
            opts = ReadOptions.parse({**session_defaults(self._spark), **given})
            if (opts.changes is None and opts.feed is None) or opts.columns or not opts.native:
                return None
            warehouse, name = opts.common.warehouse, opts.common.table
            table = open_table(warehouse, name)
            span = opts.changes if opts.feed is None else opts.feed.resolve(table)
            start, end = span if span is not None else (0, 0)
            df = native_changes(self._spark, warehouse, table, start, end, opts.feed is not None)
            return None if df is None else df._jdf.queryExecution().analyzed()
        except Exception:
            log.warning("native changes read fell back to the Python source", exc_info=True)
            return None

    def alterOptions(self, name: str, set_options: Any, unset: Any) -> None:
        """`ALTER TABLE name SET/UNSET TBLPROPERTIES` on a table exposed here: the table's
        own options change (`Table.set_options`); a refusal fails the statement."""
        warehouse = self._spark.conf.get(TABLE_WAREHOUSE_CONF + name, None)
        if not warehouse:
            return
        changes = {str(k): str(v) for k, v in set_options.items()}
        open_table(warehouse, name).set_options(changes, unset=[str(k) for k in unset])

    # file-tier streams with native micro-batches (io.dts.spark.StreamPlanner): see
    # bridge.spark.native._stream; the names are the Java interface's
    def streamOpen(self, source_id: str, options: Any, schema_json: str) -> None:
        self._streams.open(source_id, options, schema_json)

    def streamInitialOffset(self, source_id: str) -> str:
        return self._streams.initial_offset(source_id)

    def streamDefaultReadLimit(self, source_id: str) -> str:
        return self._streams.default_read_limit(source_id)

    def streamLatestOffset(self, source_id: str, start: str, limit: str) -> str:
        return self._streams.latest_offset(source_id, start, limit)

    def streamPrepareAvailableNow(self, source_id: str) -> None:
        self._streams.prepare_available_now(source_id)

    def streamBatch(self, source_id: str, start: str, end: str, key_order: bool) -> Any:
        return self._streams.batch(source_id, start, end, key_order)

    def streamStop(self, source_id: str) -> None:
        self._streams.stop(source_id)

    class Java:
        implements = ["io.dts.spark.TablePlanner"]


def install_planner(spark: Any) -> bool:
    """Let the extension plan this session's reads by name; False when it is not loaded."""
    if not extension_loaded(spark):
        return False
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = spark.sparkContext._gateway
    # binds 127.0.0.1 on a free port (pyspark's java_gateway carries no annotations)
    ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
    native_reads = spark._jvm.io.dts.spark.NativeReads
    if spark.conf.get(NATIVE_STREAMS_CONF, None) is None:  # a user's "false" opts out
        spark.conf.set(NATIVE_STREAMS_CONF, "true")
    if not native_reads.installed(spark._jsparkSession):
        native_reads.install(spark._jsparkSession, TablePlanner(spark))
    return True


def native_by_name(spark: Any) -> bool:
    """Whether reads by name in this session go through the native planner."""
    return extension_loaded(spark) and bool(
        spark._jvm.io.dts.spark.NativeReads.installed(spark._jsparkSession)
    )
