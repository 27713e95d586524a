"""Native-speed scans: splits that need no merge are read by Spark's own Parquet reader.

A FileStore data file is plain Parquet holding every table column (primary-key files
add `_KEY_*`, `_SEQUENCE_NUMBER`, `_VALUE_KIND`). A split needs no merge when

- the table has no primary key (append-only: every row is current), or
- its files form one sorted run without retractions: key ranges do not overlap and no
  file holds -U/-D rows (a fully compacted bucket, or a bucket written once). Each
  flushed or compacted file already holds at most one row per key;
- the table has deletion vectors (`deletion-vectors.enabled`): every file is read with
  the rows its vector deletes filtered out on Parquet's `_metadata.row_index` by the dts
  extension's code-generated `io.dts.spark.LiveRowFilter` (in the JVM, no Python worker);

(`filestore.read.split.merge_free`).

`dts.table(spark, "db.t")` returns one DataFrame: `spark.read.parquet(those files)`
with the table's columns selected, unioned with the `dts` Python source restricted to
the splits that do need merging (same pinned snapshot). Spark's vectorized reader then
prunes columns, pushes filters into Parquet (both visible in `explain()`), splits files
across executors, and needs no Python worker when nothing must merge.

`changes()` does the same for a changes read: the stored changelog files of the range
(see `filestore.read.changes`) are plain Parquet too, read by Spark with `_row_kind` and
`_barrier` computed from each row's `_VALUE_KIND` and file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from py4j.java_gateway import JavaClass
from pyspark.sql import DataFrame
from pyspark.sql.types import ByteType, StructField, StructType

from bridge.spark.errors import OptionError
from bridge.spark.options import BARRIER, ROW_KIND
from bridge.spark.options.catalog import open_table
from bridge.spark.options.habits import CHANGE_TYPE, CHANGE_TYPES, ROW_KINDS
from bridge.spark.options.schema import spark_schema
from bridge.spark.read.plan_scan import needs_merge
from filestore.format.row_kind import VALUE_KIND
from filestore.state.bucket_file import is_data_file_changelog

__all__ = ["table"]  # the public API (docs/reference)

if TYPE_CHECKING:
    from filestore import Table
    from filestore.read.changes import StoredChange
    from filestore.read.scan import Split

MERGE_ONLY = "scan.merge-only"  # read option: only the splits `needs_merge` selects
MERGE_TASKS = "scan.tasks"  # read option: the merge part fills this many task slots


# past this many paths Spark lists files with a distributed job (its default: 32); the
# paths come from the manifests, so listing them on the driver is a few stat calls
LISTING_CONF = "spark.sql.sources.parallelPartitionDiscovery.threshold"


def _parquet(spark: Any, struct: Any, paths: list[str]) -> Any:
    """`spark.read.parquet(paths)` of the columns of `struct` only."""
    return _parquet_rows(spark, struct, paths).select(*struct.fieldNames())


def _parquet_rows(spark: Any, struct: Any, paths: list[str]) -> Any:
    """`spark.read.parquet(paths)` without the listing job a long path list starts."""
    before = spark.conf.get(LISTING_CONF, None)
    spark.conf.set(LISTING_CONF, str(max(len(paths) + 1, 32)))
    try:  # Spark lists the paths here, when the DataFrame is made
        return spark.read.schema(struct).parquet(*paths)
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


def bucket_file_path(warehouse: str, table: Table, partition: Any, bucket: int, name: str) -> str:
    """A data or changelog file of one partition/bucket, as a path Spark can open."""
    keys = table.schema.partition_keys
    return spark_path(warehouse, table.paths.data_file(keys, partition, bucket, name))


def data_file_paths(warehouse: str, table: Table, splits: list[Split]) -> list[str]:
    """The data files of `splits`, as paths Spark can open."""
    return [
        bucket_file_path(warehouse, table, s.partition_values, s.bucket, f.file_name)
        for s in splits
        for f in s.files
    ]


def _vectors_in_jvm(spark: Any) -> bool:
    """Whether the session's JVM has the dts extension's deletion-vector filter."""
    return isinstance(spark._jvm.io.dts.spark.DeletionVectors, JavaClass)


def _live_parquet(
    spark: Any, struct: Any, warehouse: str, table: Table, splits: list[Split]
) -> Any:
    """The data files of `splits` read by Spark, without the rows their deletion vectors
    delete (`io.dts.spark.DeletionVectors`: a filter on `_metadata.row_index`, shown as
    `dts_live_row` in plans)."""
    vectors = {f.file_name: f.deletion_vector for s in splits for f in s.files if f.deletion_vector}
    paths = data_file_paths(warehouse, table, splits)
    if not vectors:
        return _parquet(spark, struct, paths)
    jvm = spark._jvm
    given = jvm.java.util.HashMap()
    for name, vector in vectors.items():
        given.put(name, bytearray(vector))
    rows = _parquet_rows(spark, struct, paths)
    live = DataFrame(jvm.io.dts.spark.DeletionVectors.live(rows._jdf, given), spark)
    return live.select(*struct.fieldNames())


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
    no-merge splits Spark reads natively (`dts.table`).

    Splits that need a merge (a primary-key bucket with overlapping runs) are read by the
    `dts` source and unioned; with the dts extension loaded, deletion vectors are applied
    in the JVM too.

    Args:
        spark: the session.
        name: the table, `db.t` (`t` means `default.t`).
        warehouse: the FileStore root; None: the Spark conf `spark.dts.warehouse`.
        snapshot_id: read this snapshot (give at most one of the four).
        barrier: read the snapshot that carries this barrier.
        timestamp: read the latest snapshot at or before this time (epoch ms).
        tag: read this tag's snapshot.

    Returns:
        A batch DataFrame of the table's columns (empty when the table has no snapshot).

    Raises:
        OptionError: no warehouse is given or configured.
        TableNotFound: the warehouse has no table `name`.
        SnapshotNotFound: the snapshot, barrier, time or tag names no retained snapshot.

    Example:
        >>> import bridge as dts
        >>> dts.table(spark, "db.orders", barrier=1764320000000).count()
        1000
    """
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
    # without the dts extension jar in this session the Python source reads every split
    fallback = t.options.deletion_vectors and not _vectors_in_jvm(spark)
    if fallback:
        native = []
    parts = []
    if native:
        parts.append(_live_parquet(spark, struct, warehouse, t, native))
    if len(native) < len(splits):
        merged = (
            spark.read.format("dts")
            .option("warehouse", warehouse)
            .option("snapshot-id", str(snap.id))
            .option(MERGE_ONLY, str(not fallback).lower())
            .option(MERGE_TASKS, str(spark.sparkContext.defaultParallelism))
            .load(name)
        )
        parts.append(merged)
    df = parts[0]
    for other in parts[1:]:
        df = df.unionByName(other)
    return df


def _row_kind_expr(has_kind: bool, names: list[str]) -> str:
    """`_row_kind` of a changelog row in Spark SQL: its `_VALUE_KIND` code, except in a
    data file listed as its commit's changelog (new keys only: +I, see
    `filestore.commit.lookup`) and in files without one (append-only tables). Only the
    cases the files need are tested per row."""
    data_files = [n for n in names if is_data_file_changelog(n)]
    if not has_kind or len(data_files) == len(names):
        return "'+I'"
    cases = " ".join(f"WHEN {code} THEN '{kind}'" for code, kind in enumerate(ROW_KINDS))
    by_code = f"CASE {VALUE_KIND} {cases} ELSE '+I' END"
    if not data_files:
        return by_code
    return f"CASE WHEN _metadata.file_name LIKE 'data-%' THEN '+I' ELSE {by_code} END"


def _barrier_expr(barriers: dict[str, int | None]) -> str:
    """`_barrier` of a changelog row: the barrier of the snapshot that stored its file.

    Always a lookup of the row's file in a map, even when every file carries the same
    barrier: Spark writes a BIGINT constant into the generated code as a Java literal, so
    a constant barrier made each micro-batch's code new, compiled again (two compilations
    a query) and run cold by the JIT, while a map constant is passed by reference and the
    code stays the one compiled for the first batch. A few files' lookup per row costs
    what the constant did (2M rows, 4 files: 240 ms against 234)."""
    known = {name: b for name, b in barriers.items() if b is not None}
    if not known:
        return "CAST(NULL AS BIGINT)"
    pairs = ", ".join(f"'{name}', CAST({b} AS BIGINT)" for name, b in known.items())
    return f"element_at(map({pairs}), _metadata.file_name)"


def changes(
    spark: Any,
    warehouse: str,
    t: Table,
    start: int,
    end: int,
    feed: bool,
    *,
    max_file_bytes: int | None = None,
    key_order: bool = False,
    files: list[StoredChange] | None = None,
) -> Any:
    """The changes of table `t` in (start, end] as Spark's own Parquet scan of the stored
    changelog files (columns pruned, filters pushed), with `_row_kind`, `_barrier` (and Delta's
    `_change_type` for a change feed); None when the range has no stored changelog or a
    file of an older schema needs the Python reader's alignment (or, with
    `max_file_bytes`, a file is larger).

    With `key_order`, a range of several snapshots of a primary-key table comes hash
    partitioned by the key and sorted within partitions in commit order (snapshot, then
    a key's before-image ahead of its after-image): one task holds each key's changes, in
    order, as a stream's upserting sink needs them. `files`: what
    `changelog_files_read_natively` already gave for this range (not read again)."""
    if files is None:
        files = changelog_files_read_natively(t, start, end, max_file_bytes)
    if files is None:
        return None
    out = spark_schema(t.schema.arrow_schema, metadata_columns=True, change_type=feed)
    if not files:
        return spark.createDataFrame([], out)
    columns = spark_schema(t.schema.arrow_schema, metadata_columns=False)
    has_kind = bool(t.primary_key)
    kind_field = [StructField(VALUE_KIND, ByteType())] if has_kind else []
    struct = StructType([*columns.fields, *kind_field])
    paths = [
        bucket_file_path(warehouse, t, f.entry.partition, f.entry.bucket, f.entry.file.file_name)
        for f in files
    ]
    barriers = {f.entry.file.file_name: f.barrier for f in files}
    kind = _row_kind_expr(has_kind, list(barriers))
    exprs = [f"`{c}`" for c in columns.fieldNames()]
    exprs += [f"{kind} AS {ROW_KIND}", f"{_barrier_expr(barriers)} AS {BARRIER}"]
    if feed:
        types = " ".join(
            f"WHEN '{k}' THEN '{c}'" for k, c in zip(ROW_KINDS, CHANGE_TYPES, strict=True)
        )
        exprs.append(f"CASE {kind} {types} END AS {CHANGE_TYPE}")
    snapshots = {f.entry.file.file_name: f.snapshot_id for f in files}
    several = key_order and bool(t.primary_key) and len(set(snapshots.values())) > 1
    if several:
        pairs = ", ".join(f"'{name}', {sid}" for name, sid in snapshots.items())
        exprs.append(f"element_at(map({pairs}), _metadata.file_name) AS {_COMMIT_ORDER}")
    rows = _parquet_rows(spark, struct, paths).selectExpr(*exprs)
    return _in_key_order(rows, t.primary_key) if several else rows


_COMMIT_ORDER = "__dts_snapshot"


def changelog_files_read_natively(
    t: Table, start: int, end: int, max_file_bytes: int | None = None
) -> list[StoredChange] | None:
    """The stored changelog files of (start, end] when Spark's scan can read them all
    (stored, of the table's current schema, none larger than `max_file_bytes`), else None."""
    files = t.changelog_files(start, end) if end > start else []
    if files is None or any(f.entry.file.schema_id != t.schema.id for f in files):
        return None
    if max_file_bytes is not None and any(f.entry.file.file_size > max_file_bytes for f in files):
        return None
    return list(files)


def _in_key_order(rows: Any, keys: list[str]) -> Any:
    from pyspark.sql import functions as F

    before_first = F.expr(f"CASE WHEN {ROW_KIND} IN ('-U', '-D') THEN 0 ELSE 1 END")
    return (
        rows.repartition(*[F.col(f"`{k}`") for k in keys])
        .sortWithinPartitions(F.col(_COMMIT_ORDER), before_first)
        .drop(_COMMIT_ORDER)
    )
