"""Data file metadata (what a manifest entry records about one file) and its statistics."""

from __future__ import annotations

import base64
import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from filestore.format.row_kind import SEQUENCE_NUMBER


class FileSource(StrEnum):
    """Who wrote a data file (``DataFileMeta.file_source``)."""

    APPEND = "APPEND"  # a writer's flush
    COMPACT = "COMPACT"  # a compaction's rewrite


def _stats_supported(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_temporal(t)
        or pa.types.is_decimal(t)
    )


def _dictionary_worthwhile(name: str, t: pa.DataType, plain_columns: set[str]) -> bool:
    """Dictionary-encode only columns likely to repeat values.

    Keys, sequence numbers and floats are (nearly) unique: building a
    dictionary for them only to fall back to plain encoding doubled the
    write time of a data file in the benchmark.
    """
    if name in plain_columns or pa.types.is_floating(t):
        return False
    return not pa.types.is_nested(t)


def parquet_write_options(
    schema: pa.Schema, compression: str, sorted_columns: Sequence[str] = ()
) -> dict[str, Any]:
    """Keyword arguments for ``pq.write_table`` of a data file.

    ``sorted_columns`` (the key columns of a sorted run, the sequence number,
    and value copies of the key) are stored without a dictionary; integer ones
    with DELTA_BINARY_PACKED, which both writes and reads faster than
    dictionary/plain + zstd and compresses sorted integers better. Floats stay
    PLAIN: BYTE_STREAM_SPLIT is faster and about 8% smaller, but Spark 4.2's
    vectorized Parquet reader (the pinned PySpark: the newest whose Kafka connector
    is published) refuses it, and Spark's own reader must read our data files.
    """
    plain = set(sorted_columns)
    dictionary = [f.name for f in schema if _dictionary_worthwhile(f.name, f.type, plain)]
    encoding = {
        f.name: "DELTA_BINARY_PACKED"
        for f in schema
        if f.name in plain and (pa.types.is_int32(f.type) or pa.types.is_int64(f.type))
    }
    codecs: str | dict[str, str] = compression
    if SEQUENCE_NUMBER in schema.names and compression != "none":
        # delta-packed sequence numbers of a key-sorted file are noise to a codec
        # (zstd: 0.02% smaller, a third slower)
        codecs = {f.name: "none" if f.name == SEQUENCE_NUMBER else compression for f in schema}
    return {
        "compression": codecs,
        "use_dictionary": dictionary,
        "column_encoding": encoding or None,
    }


#: rows per Parquet row group: files are key-sorted, so a key-range read skips the row
#: groups outside the range by their statistics (pyarrow's default, 1Mi rows, made
#: most files one or two groups and skipped nothing)
ROW_GROUP_ROWS = 128 * 1024


def write_parquet(
    data: pa.Table, sink: Any, compression: str, sorted_columns: Sequence[str] = ()
) -> pq.FileMetaData:
    """Write a data file with the options of ``parquet_write_options``; returns its footer."""
    footer: list[pq.FileMetaData] = []
    options = parquet_write_options(data.schema, compression, sorted_columns)
    pq.write_table(data, sink, metadata_collector=footer, row_group_size=ROW_GROUP_ROWS, **options)
    return footer[0]


def _footer_min_max(footer: pq.FileMetaData, column: int) -> tuple[Any, Any] | None:
    """(min, max) of a top-level column from the Parquet footer, if every row group has them.

    Parquet orders strings and binary by unsigned bytes, as Arrow's min_max does;
    the writer drops (never truncates) statistics of oversized values.
    """
    lows, highs = [], []
    for i in range(footer.num_row_groups):
        stats = footer.row_group(i).column(column).statistics
        if stats is None or not stats.has_min_max:
            return None
        lows.append(stats.min)
        highs.append(stats.max)
    return (min(lows), max(highs)) if lows else None


def _leaves(t: pa.DataType) -> int:
    """Parquet leaf columns an Arrow type is stored as."""
    if pa.types.is_map(t):
        return _leaves(t.key_type) + _leaves(t.item_type)
    if pa.types.is_struct(t):
        return sum(_leaves(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaves(t.value_type)
    return 1


def _leaf_positions(schema: pa.Schema) -> dict[str, int]:
    """Footer column index of each top-level Arrow column (its first leaf)."""
    positions, leaf = {}, 0
    for f in schema:
        positions[f.name] = leaf
        leaf += _leaves(f.type)
    return positions


def _is_string_like(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


def serialize_batch(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def deserialize_batch(data: bytes) -> pa.RecordBatch:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_next_batch()


def compute_value_stats(
    table: pa.Table, columns: list[str], footer: pq.FileMetaData | None = None
) -> tuple[bytes, dict[str, int]]:
    """(IPC batch of 2 rows: per-column min then max, null counts) over the given columns.

    Columns whose min/max is unknown (unsupported type, NaN present) hold nulls.
    With the ``footer`` of the file just written from ``table``, string and
    binary bounds are taken from its statistics (comparing strings is the
    costly part of computing them).
    """
    positions = _leaf_positions(table.schema)
    arrays, names, null_counts = [], [], {}
    for name in columns:
        col = table.column(name)
        null_counts[name] = col.null_count
        t = col.type
        if not _stats_supported(t):
            continue
        lo = hi = None
        if col.null_count < len(col):
            known = None
            if footer is not None and _is_string_like(t):
                known = _footer_min_max(footer, positions[name])
            if known is not None:
                arrays.append(pa.array(known, t))
                names.append(name)
                continue
            if pa.types.is_floating(t) and pc.any(pc.is_nan(col)).as_py():
                lo = hi = None
            elif pa.types.is_duration(t):
                # min_max has no duration kernel: order the counts of the unit
                mm = pc.min_max(col.cast(pa.int64()))
                lo, hi = mm["min"].cast(t), mm["max"].cast(t)
            else:
                mm = pc.min_max(col)
                lo, hi = mm["min"], mm["max"]
        if lo is None or hi is None or not lo.is_valid:
            arrays.append(pa.nulls(2, t))
        else:
            arrays.append(pa.array([lo, hi], t))
        names.append(name)
    batch = (
        pa.RecordBatch.from_arrays(arrays, names=names) if names else pa.RecordBatch.from_pydict({})
    )
    return serialize_batch(batch), null_counts


def key_range_bytes(sorted_keys: pa.Table) -> bytes:
    """IPC batch of 2 rows: the first and the last key of a key-sorted file."""
    n = sorted_keys.num_rows
    rows = sorted_keys.take([0, n - 1]) if n else sorted_keys.slice(0, 0)
    return serialize_batch(
        rows.combine_chunks().to_batches()[0] if rows.num_rows else pa.RecordBatch.from_pydict({})
    )


def _orderable(value: pa.Scalar) -> Any:
    """A key value as Python orders it. Timestamps, durations and times stay their
    integer count of the column's unit: ``as_py`` refuses nanoseconds that are not
    whole microseconds, and one column's keys share a unit."""
    temporal = (pa.TimestampScalar, pa.DurationScalar, pa.Time32Scalar, pa.Time64Scalar)
    if isinstance(value, temporal) and value.is_valid:
        return value.value
    return value.as_py()


@functools.lru_cache(maxsize=8192)
def _key_rows(key_range: bytes) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """A key range's min and max keys, decoded once: a file never changes, and every
    commit asks for its bucket's ranges again (sections, compaction picks, the Iceberg
    sync's one-run check): 576 decodes over 60 commits for 13 distinct ranges."""
    batch = deserialize_batch(key_range)
    if batch.num_rows < 2:
        return None
    low, high = (
        tuple(_orderable(batch.column(j)[i]) for j in range(batch.num_columns)) for i in (0, 1)
    )
    return low, high


@dataclass(frozen=True)
class DataFileMeta:
    """One data file of a bucket, as the manifest records it (docs/formats.md, 3.5).

    Attributes:
        file_name: the name inside the bucket directory.
        file_size: its size in bytes.
        row_count: rows in the file, retractions included.
        min_sequence_number: the smallest ``_SEQUENCE_NUMBER`` in the file.
        max_sequence_number: the greatest one.
        schema_id: the schema version the file was written with.
        level: the LSM level: 0 for flushed files, > 0 for compaction outputs.
        key_range: primary-key tables: Arrow IPC bytes of a 2-row batch of the
            ``_KEY_*`` columns (smallest key, greatest key); empty otherwise.
        value_stats: Arrow IPC bytes of a 2-row batch: per-column min, then max.
        null_counts: column name -> nulls in the file.
        delete_row_count: rows whose kind is -U or -D.
        creation_time_millis: when the file was written, epoch ms.
        file_source: ``APPEND`` (a writer's flush) or ``COMPACT`` (``FileSource``).
        deletion_vector: row positions no longer current, a portable Roaring bitmap;
            empty for none (``deletion-vectors.enabled``).

    Example:
        >>> files = [f for s in table.new_scan().plan() for f in s.files]
        >>> [(f.level, f.row_count, f.min_key(), f.max_key()) for f in files]
        [(0, 2, (1,), (2,))]
        >>> DataFileMeta.from_json(files[0].to_json()) == files[0]
        True
    """

    file_name: str
    file_size: int
    row_count: int
    min_sequence_number: int
    max_sequence_number: int
    schema_id: int
    level: int = 0
    key_range: bytes = b""  # IPC: row 0 = min key, row 1 = max key (primary-key tables)
    value_stats: bytes = b""  # IPC: row 0 = per-column min, row 1 = per-column max
    null_counts: dict[str, int] = field(default_factory=dict)
    delete_row_count: int = 0
    creation_time_millis: int = field(default_factory=lambda: int(time.time() * 1000))
    file_source: str = FileSource.APPEND
    # positions of rows no longer current: a portable Roaring bitmap, empty for none
    # (``filestore.state.deletion_vectors``)
    deletion_vector: bytes = b""

    def min_key(self) -> tuple[Any, ...] | None:
        """The file's smallest primary key, decoded from ``key_range``.

        Returns:
            The key's values as Python objects (temporal ones as integer counts of
            their unit), or None for a file without a key range.
        """
        return self._key_row(0)

    def max_key(self) -> tuple[Any, ...] | None:
        """The file's greatest primary key, decoded from ``key_range``.

        Returns:
            As ``min_key``.
        """
        return self._key_row(1)

    def _key_row(self, i: int) -> tuple[Any, ...] | None:
        keys = _key_rows(self.key_range) if self.key_range else None
        return keys[i] if keys is not None else None

    def stats(self) -> pa.RecordBatch | None:
        """The column statistics, decoded from ``value_stats``.

        Returns:
            A 2-row batch (row 0 the minimums, row 1 the maximums; null when unknown),
            or None when the file has none.
        """
        return deserialize_batch(self.value_stats) if self.value_stats else None

    def to_json(self) -> dict[str, Any]:
        """The metadata as JSON-ready data (bytes fields base64-encoded).

        Returns:
            A dict ``from_json`` reads back into equal metadata.
        """
        return {
            "file_name": self.file_name,
            "file_size": self.file_size,
            "row_count": self.row_count,
            "min_sequence_number": self.min_sequence_number,
            "max_sequence_number": self.max_sequence_number,
            "schema_id": self.schema_id,
            "level": self.level,
            "key_range": base64.b64encode(self.key_range).decode(),
            "value_stats": base64.b64encode(self.value_stats).decode(),
            "null_counts": dict(self.null_counts),
            "delete_row_count": self.delete_row_count,
            "creation_time_millis": self.creation_time_millis,
            "file_source": self.file_source,
            "deletion_vector": base64.b64encode(self.deletion_vector).decode(),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DataFileMeta:
        """Read metadata back from ``to_json``'s form.

        Args:
            d: the dict ``to_json`` gave (possibly through a JSON round trip).

        Returns:
            The metadata.
        """
        return cls(
            file_name=d["file_name"],
            file_size=int(d["file_size"]),
            row_count=int(d["row_count"]),
            min_sequence_number=int(d["min_sequence_number"]),
            max_sequence_number=int(d["max_sequence_number"]),
            schema_id=int(d["schema_id"]),
            level=int(d.get("level", 0)),
            key_range=base64.b64decode(d.get("key_range", "")),
            value_stats=base64.b64decode(d.get("value_stats", "")),
            null_counts={k: int(v) for k, v in d.get("null_counts", {}).items()},
            delete_row_count=int(d.get("delete_row_count", 0)),
            creation_time_millis=int(d.get("creation_time_millis", 0)),
            file_source=d.get("file_source", FileSource.APPEND),
            deletion_vector=base64.b64decode(d.get("deletion_vector", "")),
        )

    # Avro record form (manifest files): same fields, bytes stay bytes.
    def to_avro(self) -> dict[str, Any]:
        """The record a manifest file stores (schema ``DATA_FILE_AVRO``).

        Returns:
            ``to_json()`` with the bytes fields left as bytes.
        """
        d = self.to_json()
        d["key_range"] = self.key_range
        d["value_stats"] = self.value_stats
        d["deletion_vector"] = self.deletion_vector
        return d

    @classmethod
    def from_avro(cls, d: dict[str, Any]) -> DataFileMeta:
        """Read metadata back from a manifest record.

        Args:
            d: a record as ``to_avro`` gives (or an Avro reader yields).

        Returns:
            The metadata.
        """
        return cls(
            file_name=d["file_name"],
            file_size=d["file_size"],
            row_count=d["row_count"],
            min_sequence_number=d["min_sequence_number"],
            max_sequence_number=d["max_sequence_number"],
            schema_id=d["schema_id"],
            level=d["level"],
            key_range=d["key_range"],
            value_stats=d["value_stats"],
            null_counts=dict(d["null_counts"]),
            delete_row_count=d["delete_row_count"],
            creation_time_millis=d["creation_time_millis"],
            file_source=d["file_source"],
            deletion_vector=d.get("deletion_vector", b""),  # manifests written before it
        )


DATA_FILE_AVRO = {
    "type": "record",
    "name": "DataFileMeta",
    "fields": [
        {"name": "file_name", "type": "string"},
        {"name": "file_size", "type": "long"},
        {"name": "row_count", "type": "long"},
        {"name": "min_sequence_number", "type": "long"},
        {"name": "max_sequence_number", "type": "long"},
        {"name": "schema_id", "type": "long"},
        {"name": "level", "type": "int"},
        {"name": "key_range", "type": "bytes"},
        {"name": "value_stats", "type": "bytes"},
        {"name": "null_counts", "type": {"type": "map", "values": "long"}},
        {"name": "delete_row_count", "type": "long"},
        {"name": "creation_time_millis", "type": "long"},
        {"name": "file_source", "type": "string"},
        {"name": "deletion_vector", "type": "bytes", "default": ""},
    ],
}
