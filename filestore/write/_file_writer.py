"""Writing one bucket's slice of the memtable as a level-0 sorted run.

A flush hands each partition/bucket its row indices into the memtable; this
module sorts and merges those rows by key (keeping every sequence number the
run covers) and writes the data file, plus, with ``changelog-producer=input`` (or
``auto`` for a writer whose input is a full changelog), the rows as written to a
changelog file. Runs in the flush's worker threads:
everything here is Arrow/numpy work that releases the GIL.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa

from filestore.format.data_file import DataFileMeta, FileSource
from filestore.format.row_kind import SEQUENCE_NUMBER, VALUE_KIND
from filestore.format.schema import KEY_PREFIX, TableSchema
from filestore.read.merge import integer_keys, merge, take_rows, winner_indices
from filestore.state.bucket_file import write_bucket_file
from filestore.state.context import TableContext
from filestore.state.levels import BucketKey

Flushed = tuple[DataFileMeta | None, DataFileMeta | None]
"""(data file or None if every row merged away, changelog file or None)."""


def _rows(memtable: pa.Table, idx: np.ndarray) -> pa.Table:
    """Rows ``idx`` (ascending, unique) of the memtable; no copy when that is all of them."""
    return memtable if len(idx) == memtable.num_rows else take_rows(memtable, idx)


class LevelZeroWriter:
    """Turns a bucket's memtable rows into its level-0 data file and changelog file."""

    def __init__(
        self, table: TableContext, schema: TableSchema, *, input_changelog: bool = False
    ) -> None:
        self.table = table
        # the writer's schema, pinned when it started (TableContext.schema is the latest)
        self.schema = schema
        self.options = self.schema.core_options
        self.primary_key = list(self.schema.primary_key)
        self.key_columns = [KEY_PREFIX + k for k in self.primary_key]
        producer = self.options.changelog_producer
        # auto stores the input only when the writer says it is a full changelog (-U
        # before +U, full -D rows); otherwise the commit looks the old values up
        self.store_input = producer == "input" or (producer == "auto" and input_changelog)

    def flush_bucket(self, key: BucketKey, memtable: pa.Table, idx: np.ndarray) -> Flushed:
        """(data file, changelog file) of one partition/bucket: rows ``idx`` of the memtable.

        ``idx`` is ascending, so the rows are in the order they were written.
        """
        changelog = None
        if self.store_input:
            changelog = self.write_changelog(key, _rows(memtable, idx))
        return self.write_file(key, memtable, idx), changelog

    def write_changelog(self, key: BucketKey, data: pa.Table) -> DataFileMeta:
        """changelog-producer=input: the rows as written, before merging, in sequence order."""
        return self._level0(key, data, prefix="changelog")

    def _level0(self, key: BucketKey, data: pa.Table, prefix: str = "data") -> DataFileMeta:
        partition, bucket = key
        return write_bucket_file(
            self.table,
            self.schema,
            partition,
            bucket,
            data,
            level=0,
            file_source=FileSource.APPEND,
            prefix=prefix,
        )

    def _gather(self, memtable: pa.Table, rows: np.ndarray) -> pa.Table:
        """Rows of the memtable; the value copies of the key reuse the gathered keys."""
        copies = [c for c in self.primary_key if c in memtable.column_names]
        data = take_rows(memtable.drop_columns(copies), rows)
        for c in copies:
            i = memtable.schema.get_field_index(c)
            data = data.add_column(i, memtable.schema.field(c), data.column(KEY_PREFIX + c))
        return data

    def _bucket_keys(self, memtable: pa.Table, idx: np.ndarray) -> pa.Table:
        """Key columns (and _VALUE_KIND) of rows ``idx``: what deciding winners needs."""
        keys = integer_keys(memtable, self.key_columns)
        if keys is not None:
            # one integer key: a numpy gather of a single column, no kinds needed
            # (winners keep retractions in a level-0 run)
            return pa.table({self.key_columns[0]: keys[idx]})
        return take_rows(memtable.select([*self.key_columns, VALUE_KIND]), idx)

    def _sorted_run(self, memtable: pa.Table, idx: np.ndarray) -> pa.Table:
        """Rows ``idx`` as a sorted run: one row per key (retractions kept), in key order."""
        if self.primary_key and self.options.merge_engine == "deduplicate":
            # winners from the keys alone, then one take of the winning rows in key order
            chosen = winner_indices(
                self._bucket_keys(memtable, idx),
                self.key_columns,
                drop_deletes=False,
                in_order=True,
            )
            return self._gather(memtable, idx[chosen])
        if self.primary_key:
            # a memtable is in sequence order: rows were numbered as they arrived
            return merge(
                _rows(memtable, idx),
                self.key_columns,
                self.options,
                drop_deletes=False,
                in_sequence_order=True,
            )
        # an append-only table keeps its rows as written, without sequence numbers
        return _rows(memtable, idx).drop_columns([SEQUENCE_NUMBER])

    def write_file(
        self, key: BucketKey, memtable: pa.Table, idx: np.ndarray
    ) -> DataFileMeta | None:
        """The level-0 data file of rows ``idx``; None if a keyed bucket merged to nothing."""
        # sequence numbers increase in write order, and idx is in write order
        seq = memtable.column(SEQUENCE_NUMBER)
        min_seq, max_seq = seq[int(idx[0])].as_py(), seq[int(idx[-1])].as_py()
        data = self._sorted_run(memtable, idx)
        if self.primary_key and data.num_rows == 0:
            return None
        meta = self._level0(key, data)
        # the file covers every sequence number of its memtable rows, losers included
        return replace(meta, min_sequence_number=min_seq, max_sequence_number=max_seq)
