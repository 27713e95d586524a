"""The bucket hash: one stable definition shared by the FileStore and the LogStore.

Defined in docs/internals.md ("Bucket hash"). Never change it: the bucket of a
key decides the data file directory and the Kafka partition, so a different
hash would scatter one key over two buckets.

- every key value becomes canonical bytes: integers (any width, and
  dates/times/timestamps/durations as their integer storage value) as 8-byte
  little-endian int64; floats as 8-byte little-endian float64 (-0.0 as 0.0);
  booleans as one byte 0/1; strings as UTF-8; binary as is; decimals as the
  UTF-8 of their canonical string (Arrow's cast to string); null as the single
  byte 0xFF;
- per column FNV-1a 64-bit over those bytes (basis 0xcbf29ce484222325, prime
  0x100000001b3);
- columns combined in key order: ``h = h * 31 + h_col (mod 2**64)`` from 0;
- ``bucket = h mod num_buckets`` with h unsigned.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)
_COMBINE = np.uint64(31)


def _as_array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    return column


def _fixed_bytes(values: np.ndarray) -> np.ndarray:
    """(n, width) uint8 view of little-endian fixed-width values."""
    values = np.ascontiguousarray(values)
    if values.dtype.byteorder == ">":  # pragma: no cover - big-endian hosts
        values = values.byteswap().view(values.dtype.newbyteorder("<"))
    return values.view(np.uint8).reshape(len(values), values.dtype.itemsize)


def _fnv_fixed(byte_matrix: np.ndarray) -> np.ndarray:
    h = np.full(byte_matrix.shape[0], FNV_OFFSET, dtype=np.uint64)
    # one scratch array, updated in place: fresh temporaries per byte position
    # cost more in page faults than in arithmetic
    byte = np.empty_like(h)
    for j in range(byte_matrix.shape[1]):  # loop over byte positions, never rows
        np.copyto(byte, byte_matrix[:, j], casting="unsafe")
        h ^= byte
        h *= FNV_PRIME
    return h


# FNV_PRIME ** k mod 2**64: k zero bytes hash as one multiplication (x ^ 0 == x)
_PRIME_POWERS = [np.uint64(pow(int(FNV_PRIME), k, 2**64)) for k in range(9)]


def _fnv_int64(values: np.ndarray) -> np.ndarray:
    """FNV-1a of each value's 8 little-endian bytes.

    The high bytes of small non-negative values are zero in every row; they
    only multiply by the prime, so they collapse into one multiplication.
    """
    values = values.astype("<i8", copy=False)
    used = 8
    if len(values) and values.min() >= 0:
        used = (int(values.max()).bit_length() + 7) // 8
    h = _fnv_fixed(_fixed_bytes(values)[:, :used])
    if used < 8:
        h *= _PRIME_POWERS[8 - used]
    return h


def _fnv_variable(array: pa.Array) -> np.ndarray:
    """FNV-1a over variable-length binary values (nulls handled by the caller)."""
    array = array.cast(pa.large_binary())
    n = len(array)
    _, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64, count=n + 1, offset=array.offset * 8)
    data = (
        np.frombuffer(data_buf, dtype=np.uint8)
        if data_buf is not None and data_buf.size
        else np.zeros(0, dtype=np.uint8)
    )
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    h = np.full(n, FNV_OFFSET, dtype=np.uint64)
    if n == 0:
        return h
    # Rows ordered by length (longest first): at byte position j the rows still
    # consuming bytes are a prefix, so each step is a slice, not a mask.
    order = np.argsort(-lengths, kind="stable")
    sorted_starts = starts[order]
    sorted_lengths = lengths[order]
    hs = h[order]
    max_len = int(sorted_lengths[0])
    # active[j] = number of rows with length > j
    active_counts = np.searchsorted(-sorted_lengths, -np.arange(max_len), side="left")
    for j in range(max_len):
        k = int(active_counts[j])
        hs[:k] ^= data[sorted_starts[:k] + j].astype(np.uint64)
        hs[:k] *= FNV_PRIME
    h[order] = hs
    return h


def column_hash(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """FNV-1a 64 of each value's canonical bytes, as uint64."""
    array = _as_array(column)
    t = array.type
    if pa.types.is_null(t):
        h = np.empty(len(array), dtype=np.uint64)
    elif pa.types.is_boolean(t):
        values = array.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8)
        h = _fnv_fixed(values.reshape(-1, 1))
    elif pa.types.is_integer(t):
        values = (array.fill_null(0) if array.null_count else array).to_numpy(zero_copy_only=False)
        h = _fnv_int64(values)
    elif pa.types.is_floating(t):
        values = array.fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)
        values = values + 0.0  # -0.0 + 0.0 == +0.0: one key, one bucket
        h = _fnv_fixed(_fixed_bytes(values.astype("<f8")))
    elif pa.types.is_temporal(t) and not pa.types.is_interval(t):
        storage = pa.int32() if t.bit_width == 32 else pa.int64()
        values = array.view(storage).fill_null(0).to_numpy(zero_copy_only=False)
        h = _fnv_int64(values)
    elif pa.types.is_decimal(t):
        h = _fnv_variable(pc.cast(array, pa.string()).fill_null(""))
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        h = _fnv_variable(array.cast(pa.large_string()).fill_null(""))
    elif (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    ):
        h = _fnv_variable(array.cast(pa.large_binary()).fill_null(b""))
    else:
        raise TypeError(f"type {t} cannot be part of a bucket key")
    if array.null_count:
        null_hash = np.uint64(((int(FNV_OFFSET) ^ 0xFF) * int(FNV_PRIME)) % 2**64)
        mask = array.is_null().to_numpy(zero_copy_only=False)
        h = np.where(mask, null_hash, h)
    return h


def key_hash(table: pa.Table | pa.RecordBatch, key_columns: list[str]) -> np.ndarray:
    """The combined uint64 hash of the key columns of every row."""
    h = np.zeros(table.num_rows, dtype=np.uint64)
    for name in key_columns:
        h *= _COMBINE
        h += column_hash(table.column(name))
    return h


def bucket_ids(
    table: pa.Table | pa.RecordBatch, key_columns: list[str], num_buckets: int
) -> np.ndarray:
    """Bucket of every row: ``key_hash mod num_buckets`` as int32.

    The same bucket the FileStore writes a row to and the LogStore's Kafka partition.

    Args:
        table: the rows (only ``key_columns`` are read).
        key_columns: the bucket-key columns in key order (``Table.bucket_keys``).
        num_buckets: the table's bucket count (``Table.num_buckets``).

    Returns:
        An int32 array of buckets in ``[0, num_buckets)``, one per row.

    Raises:
        ValueError: ``num_buckets`` < 1 or no key column.

    Example:
        >>> import pyarrow as pa
        >>> from filestore import bucket_ids
        >>> rows = pa.table({"id": [1, 2, 3, 4]})
        >>> bucket_ids(rows, ["id"], 4).tolist()
        [0, 3, 2, 1]
    """
    if num_buckets < 1:
        raise ValueError(f"num_buckets must be >= 1, got {num_buckets}")
    if not key_columns:
        raise ValueError("bucket_ids needs at least one key column")
    if num_buckets == 1:
        return np.zeros(table.num_rows, dtype=np.int32)
    h = key_hash(table, key_columns)
    if num_buckets & (num_buckets - 1) == 0:  # a power of two: the mod is a mask
        np.bitwise_and(h, np.uint64(num_buckets - 1), out=h)
    else:
        np.remainder(h, np.uint64(num_buckets), out=h)
    return h.astype(np.int32)
