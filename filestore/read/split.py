"""Merge-on-read: turn a split's files into the current rows of its bucket.

Files of a primary-key bucket are grouped into sections of overlapping key
ranges (Paimon's interval partition). A section of one file needs no merge:
each flushed file already holds at most one current row per key, so dropping
its retractions is enough. Overlapping files are concatenated and merged by
the table's merge engine (see merge.py).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Sequence
from functools import reduce
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from filestore.errors import SchemaError
from filestore.format.data_file import DataFileMeta
from filestore.format.row_kind import INSERT, SEQUENCE_NUMBER, UPDATE_AFTER, VALUE_KIND
from filestore.format.schema import KEY_PREFIX, TableSchema
from filestore.read._polars_parquet import as_written, polars_exact, read_frame, read_whole_files
from filestore.read.merge import merge, winner_indices
from filestore.read.scan import Split, may_match
from filestore.state.bucket_file import align, key_value_schema
from filestore.state.context import TableContext
from filestore.state.deletion_vectors import drop_deleted, live_rows
from filestore.threads import parallel_map


def _key_sections(files: Sequence[DataFileMeta]) -> list[list[DataFileMeta]]:
    """Group files whose key ranges overlap (sweep over files ordered by min key)."""
    ranged: list[tuple[Any, Any, DataFileMeta]] = []
    for f in files:
        lo, hi = f.min_key(), f.max_key()
        if lo is None or hi is None:
            return [list(files)]
        ranged.append((lo, hi, f))
    try:
        ranged.sort(key=lambda r: r[0])
    except TypeError:
        return [list(files)]
    sections: list[list[DataFileMeta]] = []
    current: list[DataFileMeta] = []
    current_hi: Any = None
    for lo, hi, f in ranged:
        if current and lo <= current_hi:
            current.append(f)
            current_hi = max(current_hi, hi)
        else:
            if current:
                sections.append(current)
            current, current_hi = [f], hi
    if current:
        sections.append(current)
    return sections


def merge_free(schema: TableSchema, split: Split) -> bool:
    """Whether ``split``'s files are its current rows as they are (but for the rows their
    deletion vectors delete): an engine may then read them with its own Parquet reader.

    True for an append-only table; with deletion vectors (every key has one live row, an
    add); for files of one sorted run without retractions (a compacted bucket, or one
    written once: each file holds at most one row per key). Files of an older schema
    need this reader's alignment.
    """
    if any(f.schema_id != schema.id for f in split.files):
        return False
    if not schema.primary_key or schema.core_options.deletion_vectors:
        return True
    if any(f.delete_row_count for f in split.files):
        return False
    return one_sorted_run(split.files)


def one_sorted_run(files: Sequence[DataFileMeta]) -> bool:
    """Whether a bucket's files hold each key at most once (no two overlap in keys)."""
    return all(len(section) == 1 for section in _key_sections(files))


def _sequence_disjoint(files: Sequence[DataFileMeta]) -> bool:
    """True when files (oldest first) hold strictly increasing sequence ranges."""
    return all(a.max_sequence_number < b.min_sequence_number for a, b in itertools.pairwise(files))


def key_filter(filter: pc.Expression | None, schema: TableSchema) -> pc.Expression | None:
    """``filter`` when it names primary-key columns only, else None.

    All rows of one key match such a filter or none does, so it may drop rows before
    the merge (and skip row groups by their key statistics) without letting an older
    version of a key win. A filter on a value column must wait for the merge.
    """
    if filter is None or not schema.primary_key:
        return None
    keys = pa.schema([schema.arrow_schema.field(k) for k in schema.primary_key])
    try:
        keys.empty_table().filter(filter)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    return filter


def _row_group_guarantee(
    meta: pq.FileMetaData, group: int, columns: dict[str, tuple[int, pa.DataType]]
) -> pc.Expression:
    """What the footer statistics say about the keys of one row group."""
    terms: list[pc.Expression] = []
    rg = meta.row_group(group)
    for name, (index, typ) in columns.items():
        stats = rg.column(index).statistics
        if stats is None or not stats.has_min_max or stats.null_count:
            continue
        try:
            lo, hi = pa.scalar(stats.min).cast(typ), pa.scalar(stats.max).cast(typ)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            continue
        terms.append((pc.field(name) >= lo) & (pc.field(name) <= hi))
    return reduce(operator.and_, terms) if terms else pc.scalar(True)


def _row_positions(meta: pq.FileMetaData, groups: Sequence[int]) -> np.ndarray:
    """The file's row numbers of the rows of ``groups`` (read in that order)."""
    sizes = np.array([meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    parts = [np.arange(starts[g], starts[g] + sizes[g], dtype=np.uint32) for g in groups]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint32)


class SplitReader:
    """Reads splits of one table with a given projection and filter."""

    def __init__(
        self,
        table: TableContext,
        schema: TableSchema,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
    ) -> None:
        self.table = table
        self.schema = schema
        self.filter = filter
        names = schema.column_names
        if columns is not None:
            for c in columns:
                if c not in names:
                    raise SchemaError(
                        f"column {c!r} is not in table {table.name} (columns: {', '.join(names)})"
                    )
        self.output_columns = list(columns) if columns is not None else names
        # a filter may name any column: read everything it could need
        self.read_columns = names if filter is not None else self.output_columns
        self.key_columns = [KEY_PREFIX + k for k in schema.primary_key]
        self._primary_key = set(schema.primary_key)
        self.options = schema.core_options
        self._key_filter = key_filter(filter, schema)
        self._key_schema = pa.schema([schema.arrow_schema.field(k) for k in schema.primary_key])
        self._file_schema = key_value_schema(schema) if schema.primary_key else schema.arrow_schema
        self._polars_exact = all(
            polars_exact(schema.arrow_schema.field(c).type)
            for c in {*self.read_columns, *schema.primary_key}
        )

    def _path(self, split: Split, f: DataFileMeta) -> str:
        return self.table.paths.data_file(
            self.schema.partition_keys, split.partition_values, split.bucket, f.file_name
        )

    def _read_file(
        self, split: Split, f: DataFileMeta, system: Sequence[str] = (SEQUENCE_NUMBER, VALUE_KIND)
    ) -> pa.Table:
        """The key, the given system columns and the value columns the read needs.

        The value copies of primary-key columns are not read: they equal the
        ``_KEY_*`` columns, which ``_values`` uses instead.
        """
        path = self._path(split, f)
        with self.table.io.fs.open_input_file(path) as source:
            pf = pq.ParquetFile(source)
            present = set(pf.schema_arrow.names)
            wanted = [*self.key_columns, *system] if self.key_columns else []
            wanted += [c for c in self.read_columns if c not in self._primary_key]
            columns = [c for c in wanted if c in present]
            if self._key_filter is None:
                return drop_deleted(f, pf.read(columns=columns, use_threads=True))
            groups = self._matching_row_groups(pf.metadata)
            data = pf.read_row_groups(groups, columns=columns, use_threads=True)
            if f.deletion_vector:
                data = drop_deleted(f, data, _row_positions(pf.metadata, groups))
        return self._matching_keys(data)

    def _matching_row_groups(self, meta: pq.FileMetaData) -> list[int]:
        """Row groups whose key statistics may match the key filter (files are key-sorted,
        so a key range touches few of them)."""
        paths = [meta.schema.column(j).path for j in range(meta.num_columns)]
        columns = {
            k: (paths.index(KEY_PREFIX + k), self._key_schema.field(k).type)
            for k in self.schema.primary_key
            if KEY_PREFIX + k in paths
        }
        guarantees = [_row_group_guarantee(meta, i, columns) for i in range(meta.num_row_groups)]
        assert self._key_filter is not None
        return may_match(guarantees, self._key_filter, self._key_schema)

    def _matching_keys(self, data: pa.Table) -> pa.Table:
        """The rows whose key matches the key filter, before any merge."""
        assert self._key_filter is not None
        names = data.column_names
        keys = {KEY_PREFIX + k: k for k in self.schema.primary_key}
        view = data.rename_columns([keys.get(n, n) for n in names])
        return view.filter(self._key_filter).rename_columns(names)

    def _values(self, data: pa.Table) -> pa.Table:
        """The read columns in the current schema (keys from ``_KEY_*``, missing ones null)."""
        target = pa.schema([self.schema.arrow_schema.field(c) for c in self.read_columns])
        if self._primary_key:
            present = set(data.column_names)
            keys = {
                c: data.column(KEY_PREFIX + c)
                for c in self.read_columns
                if c in self._primary_key and KEY_PREFIX + c in present
            }
            if keys:
                rest = [c for c in data.column_names if c not in self._primary_key]
                data = pa.Table.from_arrays(
                    [*keys.values(), *(data.column(c) for c in rest)], names=[*keys, *rest]
                )
        return align(data, target)

    def read_all(self, splits: Sequence[Split]) -> list[pa.RecordBatch]:
        """Every split's batches, in split order; splits are merged in parallel threads.

        Parquet decoding, sorting and gathering release the GIL, so buckets
        merge concurrently (at most one thread per core).
        """
        parts = parallel_map(lambda s: list(self.read(s)), splits)
        return [b for part in parts for b in part]

    def read(self, split: Split) -> Iterator[pa.RecordBatch]:
        whole = self._read_merge_free(split)
        if whole is not None:
            yield from self._finish(self._values(whole))
            return
        if not self.key_columns:
            for f in split.files:
                yield from self._finish(self._values(self._read_file(split, f, ())))
            return
        if self.options.deletion_vectors:
            # every key has at most one live row (an add) in the bucket: nothing to merge
            for f in split.files:
                yield from self._finish(self._values(self._live_adds(split, f)))
            return
        for section in _key_sections(split.files):
            section.sort(key=lambda f: f.min_sequence_number)  # oldest first
            yield from self._finish(self._values(self._merge_section(split, section)))

    def _read_merge_free(self, split: Split) -> pa.Table | None:
        """A split whose files are its current rows (``merge_free``), every file read whole
        by polars in one call; None where that reader does not apply (see
        ``filestore.read._polars_parquet``): the per-file reads below then do it."""
        if not split.files or not self._whole_files_exact(split.files):
            return None
        if not merge_free(self.schema, split):
            return None
        values = [c for c in self.read_columns if c not in self._primary_key]
        return read_whole_files(
            [self._path(split, f) for f in split.files],
            self._written_types([*self.key_columns, *values]),
            keep=live_rows(split.files),
            # a file without retractions needs no look at its kinds
            adds_only=any(f.delete_row_count for f in split.files),
        )

    def _live_adds(self, split: Split, f: DataFileMeta) -> pa.Table:
        """A file's rows that are current: not deleted by its vector, not retractions."""
        data = self._read_file(split, f, (VALUE_KIND,))
        kinds = np.asarray(data.column(VALUE_KIND).to_numpy(zero_copy_only=False))
        adds = (kinds == INSERT) | (kinds == UPDATE_AFTER)
        return data if adds.all() else data.filter(pa.array(adds))

    def _merge_section(self, split: Split, section: list[DataFileMeta]) -> pa.Table:
        """The current rows of files with overlapping key ranges (oldest first)."""
        if len(section) == 1:
            data = self._read_file(split, section[0], (VALUE_KIND,))
            kinds = np.asarray(data.column(VALUE_KIND).to_numpy(zero_copy_only=False))
            adds = (kinds == INSERT) | (kinds == UPDATE_AFTER)
            if adds.all():
                return data
            if self.options.merge_engine == "aggregation":
                # retractions (a key holding only -U rows) still count: merge the file
                # (key-sorted, each key's rows in sequence order)
                return merge(
                    data, self.key_columns, self.options, drop_deletes=True, in_sequence_order=True
                )
            return data.filter(pa.array(adds))
        in_order = _sequence_disjoint(section)
        engine = self.options.merge_engine
        # files in sequence order merge on the key alone: no need for the sequence column
        need_seq = not (in_order and engine in ("deduplicate", "first-row"))
        kv_names = [*self.key_columns, *([SEQUENCE_NUMBER] if need_seq else []), VALUE_KIND]
        values = [c for c in self.read_columns if c not in self._primary_key]
        data = self._read_section(split, section, kv_names, values)
        if engine == "deduplicate":
            # pick the winners on the keys, then gather only the columns the read returns
            chosen = winner_indices(data, self.key_columns, drop_deletes=True, in_order=in_order)
            return data.select([*self.key_columns, *values]).take(chosen)
        return merge(
            data, self.key_columns, self.options, drop_deletes=True, in_sequence_order=in_order
        )

    def _read_section(
        self, split: Split, section: list[DataFileMeta], kv_names: list[str], values: list[str]
    ) -> pa.Table:
        """The files' key, system and value columns, concatenated in the order given."""
        if self._whole_files_exact(section):
            paths = [self._path(split, f) for f in section]
            names = [*kv_names, *values]
            return as_written(read_frame(paths, names), self._written_types(names))
        target = pa.schema([self.schema.arrow_schema.field(c) for c in values])
        # files of different schema versions: align before concatenating
        aligned = [
            pa.Table.from_arrays(
                [t.column(c) for c in kv_names] + align(t, target).columns,
                names=kv_names + values,
            )
            for t in (self._read_file(split, f, kv_names[len(self.key_columns) :]) for f in section)
        ]
        return pa.concat_tables(aligned)

    def _written_types(self, names: Sequence[str]) -> pa.Schema:
        """The columns ``names`` as data files of the current schema hold them."""
        return pa.schema([self._file_schema.field(n) for n in names])

    def _whole_files_exact(self, files: Sequence[DataFileMeta]) -> bool:
        """Whether polars may read ``files`` whole (``filestore.read._polars_parquet``): local,
        of the current schema, of exact types, and no key filter to skip row groups by."""
        return (
            self._polars_exact
            and self.table.io.is_local
            and self._key_filter is None
            and all(f.schema_id == self.schema.id for f in files)
        )

    def _finish(self, data: pa.Table) -> Iterator[pa.RecordBatch]:
        if self.filter is not None:
            data = data.filter(self.filter)
        if data.column_names != self.output_columns:
            data = data.select(self.output_columns)
        yield from data.to_batches()

    def output_schema(self) -> pa.Schema:
        return pa.schema([self.schema.arrow_schema.field(c) for c in self.output_columns])
