"""Read several tables at one consistent barrier (FLIP-276): V11, V21, V31 together or not at all.

With a MetaService URL the service answers (it also waits for the tables *between*
the listed ones in the lineage); without one the answer is computed from the
FileStore snapshots directly, each of which carries its barrier.

Imports within bridge: bridge.meta, bridge.spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

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
    """``{table name as given: data}`` plus the ``version`` it was read at."""

    def __init__(self, data: dict[str, V], version: ConsistentVersion) -> None:
        super().__init__(data)
        self.version = version


def resolve_version(
    tables: Sequence[str],
    *,
    catalog: Catalog | None = None,
    meta_url: str | None = None,
    mode: ConsistencyMode | ConsistencyModeName = ConsistencyMode.STRONG,
) -> ConsistentVersion:
    """The consistent version of ``tables``, from the MetaService or from the FileStore.

    Raises :class:`bridge.meta.errors.NoConsistentVersion` when a strong read is not
    possible yet (naming the table that holds it back).
    """
    mode = ConsistencyMode(mode)
    names = [normalize_table_name(t) for t in tables]
    if meta_url:
        # the MetaService's client (httpx, pydantic) only when one is asked: without it the
        # answer comes from the snapshots, on a driver with dynamic-table-storage[spark] only
        from bridge.meta.client import MetaClient

        with MetaClient(meta_url) as client:
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
    """``{table: pa.Table}`` read through the FileStore API at one consistent barrier."""
    version = resolve_version(tables, catalog=catalog, meta_url=meta_url, mode=mode)
    out: dict[str, pa.Table] = {}
    for name, v in _listed(version, tables).items():
        table = catalog.get_table(normalize_table_name(name))
        cols = list(columns) if columns is not None else None
        if v.snapshot_id is not None:
            out[name] = table.read(snapshot_id=v.snapshot_id, columns=cols)
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
) -> ConsistentTables[DataFrame]:
    """``{table: DataFrame}`` read with the ``dts`` Spark source at one consistent barrier."""
    catalog = None
    if not meta_url:
        catalog = Catalog(str(warehouse))
    # bridge.spark loads pyspark: consistent_read_tables (Arrow) must not need it
    from bridge.spark import register

    register(spark)  # idempotent: makes format("dts") available
    version = resolve_version(tables, catalog=catalog, meta_url=meta_url, mode=mode)
    out: dict[str, DataFrame] = {}
    for name, v in _listed(version, tables).items():
        reader = spark.read.format("dts").option("warehouse", str(warehouse))
        if v.snapshot_id is not None:
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

    Raises :class:`bridge.meta.errors.NoConsistentVersion` when the tables share no
    completed barrier yet, ``TagError`` when a table has the tag and ``replace`` is off.
    """
    version = resolve_version(tables, catalog=catalog, meta_url=meta_url)
    targets: list[tuple[str, Table, Snapshot]] = []
    for name, v in _listed(version, tables).items():
        table = catalog.get_table(normalize_table_name(name))
        targets.append((name, table, _pinned(table, v)))
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


def _pinned(table: Table, v: TableVersion) -> Snapshot:
    """The snapshot of a table's part of a strong version."""
    if v.snapshot_id is not None:
        return table.snapshot(v.snapshot_id)
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
