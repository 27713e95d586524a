"""Read several tables at one consistent barrier (FLIP-276): V11, V21, V31 together or not at all.

With a MetaService URL the service answers (it also waits for the tables *between*
the listed ones in the lineage); without one the answer is computed from the
FileStore snapshots directly, each of which carries its barrier.

Imports within bridge: bridge.errors, bridge.meta, bridge.spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from bridge.errors import ConsistentSnapshotExpired
from bridge.meta.consistency import consistent_version
from bridge.meta.filestore_source import FileStoreBarriers
from bridge.meta.versions import (
    ConsistencyMode,
    ConsistencyModeName,
    ConsistentVersion,
    TableVersion,
    normalize_table_name,
)
from filestore import Catalog, FileStoreError, Snapshot, Table
from filestore.errors import SnapshotNotFound, TagError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

V = TypeVar("V")


class ConsistentTables(dict[str, V], Generic[V]):
    """``{table name as given: data}`` plus the ``version`` it was read at.

    Args:
        data: each table's data (an Arrow table, a DataFrame, a snapshot), by the name
            the caller gave.
        version: the consistent version the data was read at (its barrier, and each
            table's snapshot).

    Example:
        >>> import bridge as dts
        >>> tables = dts.consistent_read_tables(catalog, ["db.orders", "db.totals"])
        >>> tables["db.totals"].num_rows, tables.version.barrier
        (120, 1764320000000)
    """

    def __init__(self, data: dict[str, V], version: ConsistentVersion) -> None:
        super().__init__(data)
        self.version = version


def resolve_version(
    tables: Sequence[str],
    *,
    catalog: Catalog | None = None,
    meta_url: str | None = None,
    mode: ConsistencyMode | ConsistencyModeName = ConsistencyMode.STRONG,
    meta_ca_file: str | None = None,
) -> ConsistentVersion:
    """The consistent version of ``tables``, from the MetaService or from the FileStore.

    Args:
        tables: table names (`db.t`; `t` means `default.t`).
        catalog: the warehouse's catalog; answers from its snapshots when no
            ``meta_url`` is given.
        meta_url: the MetaService's URL; it answers, waiting for the tables between
            the listed ones in the lineage too.
        mode: ``strong`` (one barrier every table has completed) or ``weak`` (each
            table's latest snapshot).
        meta_ca_file: the CA file an https MetaService is verified with (None: env
            ``DTS_META_CA_FILE``, else the system trust store).

    Returns:
        The barrier and, per table, the snapshot to read.

    Raises:
        NoConsistentVersion: a strong read is not possible yet; it names the table that
            holds it back.
        ValueError: neither a catalog nor a MetaService URL is given.

    Example:
        >>> resolve_version(["db.orders", "db.totals"], catalog=catalog).barrier
        1764320000000
    """
    mode = ConsistencyMode(mode)
    names = [normalize_table_name(t) for t in tables]
    if meta_url:
        # the MetaService's client (httpx, pydantic) only when one is asked: without it the
        # answer comes from the snapshots, on a driver with dynamic-table-storage[spark] only
        from bridge.meta.client import MetaClient

        with MetaClient(meta_url, ca_file=meta_ca_file) as client:
            return client.consistent_version(names, mode)
    if catalog is None:
        raise ValueError("give a catalog (or a warehouse) or a meta_url")
    return consistent_version(FileStoreBarriers(catalog), names, mode)


def _listed(version: ConsistentVersion, tables: Sequence[str]) -> dict[str, TableVersion]:
    by_name = {v.table: v for v in version.tables}
    return {t: by_name[normalize_table_name(t)] for t in tables}


def consistent_read_tables(
    catalog: Catalog,
    tables: Sequence[str],
    *,
    meta_url: str | None = None,
    mode: ConsistencyMode | ConsistencyModeName = ConsistencyMode.STRONG,
    columns: Sequence[str] | None = None,
) -> ConsistentTables[pa.Table]:
    """``{table: pa.Table}`` read through the FileStore API at one consistent barrier.

    Args:
        catalog: the warehouse's catalog.
        tables: table names (`db.t`).
        meta_url: the MetaService's URL (None: the barrier comes from the snapshots).
        mode: ``strong`` or ``weak`` (see `resolve_version`).
        columns: the columns to read (None: all).

    Returns:
        Each table's rows by the name given, and the version they were read at.

    Raises:
        NoConsistentVersion: a strong read is not possible yet.
        ConsistentSnapshotExpired: a table's snapshot at the version expired (another
            table lags by more than it keeps snapshots); names both and the option.
        TableNotFound: a table is not in the warehouse.

    Example:
        >>> import bridge as dts
        >>> from filestore import Catalog
        >>> tables = dts.consistent_read_tables(Catalog("/data/warehouse"),
        ...                                     ["db.orders", "db.customer_totals"])
        >>> tables["db.orders"].num_rows
        1000
    """
    version = resolve_version(tables, catalog=catalog, meta_url=meta_url, mode=mode)
    out: dict[str, pa.Table] = {}
    for name, v in _listed(version, tables).items():
        table = catalog.get_table(normalize_table_name(name))
        cols = list(columns) if columns is not None else None
        if v.snapshot_id is not None:
            try:
                out[name] = table.read(snapshot_id=v.snapshot_id, columns=cols)
            except SnapshotNotFound as e:
                raise expired(table, v, version) from e
        elif v.barrier is not None:
            out[name] = table.read(barrier=v.barrier, columns=cols)
        else:
            out[name] = table.read(columns=cols)  # weak, no barrier completed yet
    return ConsistentTables(out, version)


def consistent_read(
    spark: SparkSession,
    tables: Sequence[str],
    *,
    warehouse: str | Path,
    meta_url: str | None = None,
    mode: ConsistencyMode | ConsistencyModeName = ConsistencyMode.STRONG,
    meta_ca_file: str | None = None,
) -> ConsistentTables[DataFrame]:
    """``{table: DataFrame}`` read with the ``dts`` Spark source at one consistent barrier.

    Args:
        spark: the session (the `dts` source is registered in it).
        tables: table names (`db.t`).
        warehouse: the FileStore root.
        meta_url: the MetaService's URL (None: the barrier comes from the snapshots).
        mode: ``strong`` or ``weak`` (see `resolve_version`).
        meta_ca_file: the CA file an https MetaService is verified with (None: the conf
            `spark.dts.meta.ca-file`, then env ``DTS_META_CA_FILE``).

    Returns:
        Each table's DataFrame by the name given, and the version they are read at.

    Raises:
        NoConsistentVersion: a strong read is not possible yet.
        ConsistentSnapshotExpired: a table's snapshot at the version expired (another
            table lags by more than it keeps snapshots); names both and the option.

    Example:
        >>> import bridge as dts
        >>> dfs = dts.consistent_read(spark, ["db.orders", "db.customer_totals"],
        ...                           warehouse="/data/warehouse")
        >>> dfs["db.orders"].join(dfs["db.customer_totals"], "customer_id").count()
        1000
    """
    catalog = None
    if not meta_url:
        catalog = Catalog(str(warehouse))
    # bridge.spark loads pyspark: consistent_read_tables (Arrow) must not need it
    from bridge.spark import register
    from bridge.spark.options.keys import session_defaults

    register(spark)  # idempotent: makes format("dts") available
    meta_ca_file = meta_ca_file or session_defaults(spark).get("meta.ca-file")
    version = resolve_version(
        tables, catalog=catalog, meta_url=meta_url, mode=mode, meta_ca_file=meta_ca_file
    )
    out: dict[str, DataFrame] = {}
    catalog = catalog or Catalog(str(warehouse))
    for name, v in _listed(version, tables).items():
        reader = spark.read.format("dts").option("warehouse", str(warehouse))
        if v.snapshot_id is not None:
            # here, not as Spark's wrapped error of the source at the first action
            _pinned(catalog.get_table(normalize_table_name(name)), v, version)
            reader = reader.option("snapshot-id", str(v.snapshot_id))
        out[name] = reader.load(normalize_table_name(name))
    return ConsistentTables(out, version)


def tag_consistent(
    catalog: Catalog,
    tables: Sequence[str],
    tag: str,
    *,
    meta_url: str | None = None,
    replace: bool = False,
) -> ConsistentTables[Snapshot]:
    """Pin the tables' strong consistent version as tag ``tag`` on each of them.

    The tag is also an Iceberg tag on tables that write Iceberg metadata, so engines
    that read Iceberg (DuckDB, Trino, pyiceberg) read the set at one point with
    ``FOR VERSION AS OF 'tag'`` or the tag's snapshot id. All or none: when a table
    cannot take the tag, the tags made so far are removed. ``replace`` moves an existing
    tag of that name (each table's tag moves in turn, not all at one instant).

    Args:
        catalog: the warehouse's catalog.
        tables: table names (`db.t`).
        tag: the tag's name, the same on every table.
        meta_url: the MetaService's URL (None: the barrier comes from the snapshots).
        replace: move an existing tag of that name.

    Returns:
        The snapshot tagged on each table, by the name given, and the version.

    Raises:
        NoConsistentVersion: the tables share no completed barrier yet.
        ConsistentSnapshotExpired: a table's snapshot at the version expired.
        TagError: a table has the tag and ``replace`` is off.

    Example:
        >>> import bridge as dts
        >>> from bridge.consistency_read import tag_consistent
        >>> pinned = tag_consistent(catalog, ["shop.orders", "shop.totals"], "eod")
        >>> pinned["shop.orders"].barrier == pinned["shop.totals"].barrier
        True
        >>> # pyiceberg: table.scan(snapshot_id=table.metadata.refs["eod"].snapshot_id)
    """
    version = resolve_version(tables, catalog=catalog, meta_url=meta_url)
    targets: list[tuple[str, Table, Snapshot]] = []
    for name, v in _listed(version, tables).items():
        table = catalog.get_table(normalize_table_name(name))
        targets.append((name, table, _pinned(table, v, version)))
    if not replace:
        for name, table, _ in targets:
            if tag in dict(table.list_tags()):
                raise TagError(f"table {name} already has a tag {tag!r}; pass replace=True")
    made: list[Table] = []
    try:
        for _, table, snap in targets:
            if replace and tag in dict(table.list_tags()):
                table.delete_tag(tag)
            table.create_tag(tag, snap.id)
            made.append(table)
    except FileStoreError:
        for table in made:
            table.delete_tag(tag)
        raise
    return ConsistentTables({name: snap for name, _, snap in targets}, version)


def expired(table: Table, v: TableVersion, version: ConsistentVersion) -> ConsistentSnapshotExpired:
    """The error of a strong version whose snapshot of ``table`` expiration removed: which
    table held the version back and by how much, against what ``table`` keeps."""
    opts = table.options
    lag = (
        f"{version.held_back_by}, {version.holdback_ms / 1000:,.1f} s behind the newest table,"
        if version.held_back_by
        else "the slowest of its tables"
    )
    return ConsistentSnapshotExpired(
        f"table {table.name}'s snapshot {v.snapshot_id} at the consistent barrier "
        f"{version.barrier} has expired: the version pins the newest barrier every one of "
        f"its tables completed, held back by {lag} while {table.name} keeps snapshots for "
        f"{opts.snapshot_time_retained_ms / 1000:,.0f} s (snapshot.time-retained; at least "
        f"{opts.snapshot_num_retained_min}). Raise its snapshot.time-retained above that "
        f"lag (dts table alter {table.name} --set snapshot.time-retained=...), or find why "
        f"{version.held_back_by or 'that table'} lags"
    )


def _pinned(table: Table, v: TableVersion, version: ConsistentVersion) -> Snapshot:
    """The snapshot of a table's part of a strong version."""
    if v.snapshot_id is not None:
        try:
            return table.snapshot(v.snapshot_id)
        except SnapshotNotFound as e:
            raise expired(table, v, version) from e
    snap = table.resolve_snapshot(barrier=v.barrier) if v.barrier is not None else None
    if snap is None:  # as consistent_read_tables reads it
        raise SnapshotNotFound(f"table {table.name} has no snapshot at barrier {v.barrier}")
    return snap


__all__ = [
    "ConsistentTables",
    "consistent_read",
    "consistent_read_tables",
    "resolve_version",
    "tag_consistent",
]
