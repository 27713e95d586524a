"""Scan planning: which files of a snapshot a read needs, grouped into splits.

Pruning uses the manifest statistics through pyarrow's own expression
simplification: every file becomes a dataset fragment whose guarantee says
"partition == values and min <= column <= max"; ``get_fragments(filter)``
drops the fragments the filter cannot match. Primary-key tables only use the
partition and key columns' ranges: skipping a file because of a value column
could resurrect an older version of a key.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from filestore.errors import SchemaError
from filestore.format.data_file import DataFileMeta
from filestore.format.manifest import ManifestEntry
from filestore.format.snapshot import Snapshot
from filestore.state.context import TableContext


@dataclass(frozen=True)
class Split:
    """The files of one partition/bucket at one snapshot: the unit of parallel reading.

    Picklable; ``Table.read_split`` turns it into record batches.

    Attributes:
        snapshot_id: the snapshot it was planned from.
        partition: partition column -> value (as stored: a string, or None for null).
        bucket: the bucket number.
        files: the data files to merge, in sequence-number order.
        total_buckets: the table's bucket count when the files were written.
        row_count: rows in the files (before merging: an upper bound of rows read).
        raw_convertible: True when the files need no merging (append table, or one
            file without deletions).

    Example:
        >>> splits = table.new_scan(columns=["id"]).plan()
        >>> sum(t.num_rows for s in splits for t in table.read_split(s, columns=["id"]))
        2
    """

    snapshot_id: int
    partition: dict[str, str | None]
    bucket: int
    files: tuple[DataFileMeta, ...]
    total_buckets: int = 1
    row_count: int = field(default=0)
    # True when the files need no merging (append table, or one file per key range)
    raw_convertible: bool = False

    @property
    def partition_values(self) -> tuple[str | None, ...]:
        """The partition's values in partition-key order."""
        return tuple(self.partition.values())


def _scalar(value: Any, typ: pa.DataType) -> pa.Scalar:
    return pa.scalar(value, type=typ)


def file_guarantee(
    entry: ManifestEntry, schema: pa.Schema, partition_keys: Sequence[str], stats_columns: set[str]
) -> pc.Expression:
    """What is known about every row of this file, as an expression."""
    terms: list[pc.Expression] = []
    for k, v in zip(partition_keys, entry.partition, strict=True):
        typ = schema.field(k).type
        if v is None:
            terms.append(pc.field(k).is_null())
        else:
            with contextlib.suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError):
                terms.append(pc.field(k) == pa.scalar(v).cast(typ))
    stats = entry.file.stats()
    if stats is not None and stats.num_rows == 2:
        for name in stats.schema.names:
            if name not in stats_columns or name not in schema.names:
                continue
            lo, hi = stats.column(name)[0], stats.column(name)[1]
            nulls = entry.file.null_counts.get(name, 1)
            if nulls == entry.file.row_count:
                terms.append(pc.field(name).is_null())
            elif nulls == 0 and lo.is_valid and hi.is_valid:
                typ = schema.field(name).type
                try:
                    lo, hi = lo.cast(typ), hi.cast(typ)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    continue
                terms.append((pc.field(name) >= lo) & (pc.field(name) <= hi))
    if not terms:
        return pc.scalar(True)
    return reduce(operator.and_, terms)


def prune(
    entries: list[ManifestEntry],
    filter: pc.Expression,
    schema: pa.Schema,
    partition_keys: Sequence[str],
    stats_columns: set[str],
) -> list[ManifestEntry]:
    """The entries whose files may hold rows matching filter."""
    if not entries:
        return entries
    guarantees = [file_guarantee(e, schema, partition_keys, stats_columns) for e in entries]
    return [entries[i] for i in may_match(guarantees, filter, schema)]


def may_match(
    guarantees: Sequence[pc.Expression], filter: pc.Expression, schema: pa.Schema
) -> list[int]:
    """Indexes of the guarantees under which ``filter`` may hold for some row.

    pyarrow simplifies the filter under each guarantee as it does for a dataset's
    partitions, so no expression tree is walked here.
    """
    paths = [f"/{i}" for i in range(len(guarantees))]
    dataset = ds.FileSystemDataset.from_paths(
        paths,
        schema=schema,
        format=ds.ParquetFileFormat(),
        filesystem=pafs.LocalFileSystem(),
        partitions=list(guarantees),
    )
    try:
        return [int(f.path[1:]) for f in dataset.get_fragments(filter=filter)]
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        raise SchemaError(f"filter {filter} does not fit the table schema: {e}") from None


class TableScan:
    """Plans the splits of one snapshot of a table.

    Made by ``Table.new_scan``, which resolves the snapshot; pruning by partition,
    bucket and file statistics happens here, row filtering when splits are read.

    Args:
        table: the table.
        snapshot: the snapshot to plan; None (an empty table) plans nothing.
        filter: a row filter; files whose statistics (and partition) rule it out are
            skipped.
        columns: the columns the reader will project (None: all); kept for it.
        partition: partition column -> value; only files of that partition.
        buckets: only files of these bucket numbers.

    Example:
        >>> import pyarrow.compute as pc
        >>> scan = table.new_scan(filter=pc.field("id") > 1)
        >>> [(s.bucket, s.row_count) for s in scan.plan()]
        [(0, 2)]
    """

    def __init__(
        self,
        table: TableContext,
        snapshot: Snapshot | None,
        filter: pc.Expression | None = None,
        columns: Sequence[str] | None = None,
        partition: dict[str, Any] | None = None,
        buckets: Sequence[int] | None = None,
    ) -> None:
        self.table = table
        self.snapshot = snapshot
        self.filter = filter
        self.columns = list(columns) if columns is not None else None
        self.partition = partition
        self.buckets = set(buckets) if buckets is not None else None

    def entries(self) -> list[ManifestEntry]:
        """Live manifest entries after pruning.

        Returns:
            The entries (one per live data file) that may hold matching rows.

        Raises:
            SchemaError: ``partition`` names a column that is not a partition column,
                or ``filter`` does not fit the table schema.
        """
        if self.snapshot is None:
            return []
        entries = self.table.live_entries(self.snapshot)
        schema = self.table.schema
        if self.buckets is not None:
            entries = [e for e in entries if e.bucket in self.buckets]
        if self.partition:
            wanted = {k: (None if v is None else str(v)) for k, v in self.partition.items()}
            for k in wanted:
                if k not in schema.partition_keys:
                    raise SchemaError(f"{k!r} is not a partition column of {self.table.name}")
            idx = {k: schema.partition_keys.index(k) for k in wanted}
            entries = [
                e for e in entries if all(e.partition[idx[k]] == v for k, v in wanted.items())
            ]
        if self.filter is not None:
            stats_columns = (
                set(schema.primary_key) if schema.primary_key else set(schema.column_names)
            )
            entries = prune(
                entries, self.filter, schema.arrow_schema, schema.partition_keys, stats_columns
            )
        return entries

    def plan(self) -> list[Split]:
        """One split per partition/bucket that has files left after pruning.

        Returns:
            The splits ordered by partition, then bucket; empty for an empty table.

        Raises:
            SchemaError: as ``entries``.
        """
        if self.snapshot is None:
            return []
        keys = self.table.schema.partition_keys
        groups: dict[tuple[tuple[str | None, ...], int], list[ManifestEntry]] = {}
        for e in self.entries():
            groups.setdefault((e.partition, e.bucket), []).append(e)
        has_pk = bool(self.table.schema.primary_key)
        splits = []
        for (part, bucket), es in sorted(
            groups.items(), key=lambda kv: (_sortable(kv[0][0]), kv[0][1])
        ):
            files = tuple(sorted((e.file for e in es), key=lambda f: f.min_sequence_number))
            splits.append(
                Split(
                    snapshot_id=self.snapshot.id,
                    partition=dict(zip(keys, part, strict=True)),
                    bucket=bucket,
                    files=files,
                    total_buckets=es[0].total_buckets,
                    row_count=sum(f.row_count for f in files),
                    raw_convertible=not has_pk
                    or (len(files) == 1 and files[0].delete_row_count == 0),
                )
            )
        return splits


def _sortable(values: tuple[str | None, ...]) -> tuple[tuple[bool, str], ...]:
    return tuple((v is None, v or "") for v in values)
