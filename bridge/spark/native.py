"""Native-speed scans: splits that need no merge are read by Spark's own Parquet reader.

A FileStore data file is plain Parquet holding every table column (primary-key files
add `_KEY_*`, `_SEQUENCE_NUMBER`, `_VALUE_KIND`). A split needs no merge when

- the table has no primary key (append-only: every row is current), or
- its files form one sorted run without retractions: key ranges do not overlap and no
  file holds -U/-D rows (a fully compacted bucket, or a bucket written once). Each
  flushed or compacted file already holds at most one row per key.

`dts.table(spark, "db.t")` returns one DataFrame: `spark.read.parquet(those files)`
with the table's columns selected, unioned with the `dts` Python source restricted to
the splits that do need merging (same pinned snapshot). Spark's vectorized reader then
prunes columns, pushes filters into Parquet (both visible in `explain()`), splits files
across executors, and needs no Python worker when nothing must merge.
"""

from __future__ import annotations

from typing import Any

from bridge.spark.arrow_schema import spark_schema
from bridge.spark.catalog import open_table
from bridge.spark.errors import OptionError
from bridge.spark.plan_scan import needs_merge

MERGE_ONLY = "scan.merge-only"  # read option: only the splits `needs_merge` selects
MERGE_TASKS = "scan.tasks"  # read option: the merge part fills this many task slots


# past this many paths Spark lists files with a distributed job (its default: 32); the
# paths come from the manifests, so listing them on the driver is a few stat calls
LISTING_CONF = "spark.sql.sources.parallelPartitionDiscovery.threshold"


def _parquet(spark: Any, struct: Any, paths: list[str]) -> Any:
    """`spark.read.parquet(paths)` without the listing job a long path list starts."""
    before = spark.conf.get(LISTING_CONF, None)
    spark.conf.set(LISTING_CONF, str(max(len(paths) + 1, 32)))
    try:  # Spark lists the paths here, when the DataFrame is made
        return spark.read.schema(struct).parquet(*paths).select(*struct.fieldNames())
    finally:
        if before is None:
            spark.conf.unset(LISTING_CONF)
        else:
            spark.conf.set(LISTING_CONF, before)


def spark_path(warehouse: str, path: str) -> str:
    """A FileStore path (as its pyarrow filesystem names it) as a URI Spark can open."""
    if "://" in path:
        return path
    if "://" in warehouse:
        return f"{warehouse.split('://', 1)[0]}://{path}"
    return f"file://{path}"


def data_file_paths(warehouse: str, table: Any, splits: list[Any]) -> list[str]:
    """The data files of `splits`, as paths Spark can open."""
    keys = table.schema.partition_keys
    return [
        spark_path(
            warehouse, table.paths.data_file(keys, s.partition_values, s.bucket, f.file_name)
        )
        for s in splits
        for f in s.files
    ]


def table(
    spark: Any,
    name: str,
    *,
    warehouse: str | None = None,
    snapshot_id: int | None = None,
    barrier: int | None = None,
    timestamp: int | None = None,
    tag: str | None = None,
) -> Any:
    """The rows of table `name` at a snapshot (latest by default) as a DataFrame whose
    no-merge splits Spark reads natively. `warehouse` defaults to `spark.dts.warehouse`."""
    warehouse = warehouse or spark.conf.get("spark.dts.warehouse", None)
    if not warehouse:
        raise OptionError("dts.table needs warehouse= or the Spark conf spark.dts.warehouse")
    if "." not in name:
        name = f"default.{name}"
    t = open_table(warehouse, name)
    struct = spark_schema(t.schema.arrow_schema, metadata_columns=False)
    snap = t.resolve_snapshot(snapshot_id, barrier=barrier, timestamp=timestamp, tag=tag)
    if snap is None:
        return spark.createDataFrame([], struct)
    splits = t.new_scan(snapshot_id=snap.id).plan()
    native = [s for s in splits if not needs_merge(t, s)]
    parts = []
    if native:
        parts.append(_parquet(spark, struct, data_file_paths(warehouse, t, native)))
    if len(native) < len(splits):
        merged = (
            spark.read.format("dts")
            .option("warehouse", warehouse)
            .option("snapshot-id", str(snap.id))
            .option(MERGE_ONLY, "true")
            .option(MERGE_TASKS, str(spark.sparkContext.defaultParallelism))
            .load(name)
        )
        parts.append(merged)
    df = parts[0]
    for other in parts[1:]:
        df = df.unionByName(other)
    return df
