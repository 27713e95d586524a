"""Iceberg position delete files made from what dts itself skips in a data file: the
rows its deletion vector deletes and its retraction rows (-U, -D).

Position deletes (format version 2), not Iceberg v3 deletion vectors: every Iceberg
reader here (pyiceberg 0.12, DuckDB 1.4, Spark's runtime) reads them, and a file's
deletes are written once, under a name made of the data file and the positions, so a
snapshot whose vector did not change reuses its predecessor's file.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from filestore.format.data_file import DataFileMeta
from filestore.format.row_kind import INSERT, UPDATE_AFTER, VALUE_KIND
from filestore.iceberg.manifests import DELETE_FILE_PATH_ID, DELETE_POS_ID
from filestore.state.context import TableContext
from filestore.state.deletion_vectors import deleted_positions

DELETE_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), False, {"PARQUET:field_id": str(DELETE_FILE_PATH_ID)}),
        pa.field("pos", pa.int64(), False, {"PARQUET:field_id": str(DELETE_POS_ID)}),
    ]
)
#: DELETE_SCHEMA as written: the path column dictionary-encoded in memory
_WRITE_SCHEMA = pa.schema(
    [
        pa.field(
            "file_path",
            pa.dictionary(pa.int32(), pa.string()),
            False,
            {"PARQUET:field_id": str(DELETE_FILE_PATH_ID)},
        ),
        DELETE_SCHEMA.field("pos"),
    ]
)


def skipped_rows(ctx: TableContext, path: str, meta: DataFileMeta) -> np.ndarray:
    """Row positions of a data file that dts does not read (sorted, unique, int64)."""
    deleted = deleted_positions(meta).astype(np.int64)
    if not meta.delete_row_count:
        return deleted
    with ctx.io.fs.open_input_file(path) as f:
        kinds = pq.read_table(f, columns=[VALUE_KIND]).column(VALUE_KIND)
    kind = np.asarray(kinds.to_numpy(zero_copy_only=False))
    retractions = np.flatnonzero((kind != INSERT) & (kind != UPDATE_AFTER)).astype(np.int64)
    return np.union1d(deleted, retractions)


def delete_file_prefix(meta: DataFileMeta) -> str:
    """``deletes-<data file>-<vector's crc>-``, then the positions' count: a data file's
    retraction rows never change, so the name changes exactly when its vector does."""
    stem = meta.file_name.rsplit(".", 1)[0]
    return f"deletes-{stem}-{zlib.crc32(meta.deletion_vector):08x}-"


def write_position_deletes(ctx: TableContext, path: str, data_path: str, pos: np.ndarray) -> int:
    """Write the delete file at ``path`` unless it exists; returns its size.

    Written in place, without a temporary file and rename: nothing names it until the
    manifest that does is written, and a table with deletion vectors writes one at
    every commit for each file whose vector grew. A file already there (another writer,
    an earlier failed sync) holds the same positions: its name says which."""
    if ctx.io.exists(path):
        return ctx.io.file_size(path)
    # the path as one dictionary value, not repeated per row (tens of thousands of
    # copies to build, then hash back into a dictionary); positions, sorted, as deltas:
    # a third of the time and a sixth of the bytes of plain zstd for 60k positions
    file_path = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(len(pos), dtype=np.int32)), pa.array([data_path], pa.string())
    )
    rows = pa.table({"file_path": file_path, "pos": pos}, schema=_WRITE_SCHEMA)
    sink = pa.BufferOutputStream()
    pq.write_table(
        rows,
        sink,
        compression="zstd",
        use_dictionary=["file_path"],
        column_encoding={"pos": "DELTA_BINARY_PACKED"},
        store_schema=False,  # readers see file_path as the string DELETE_SCHEMA says
    )
    data = sink.getvalue().to_pybytes()
    ctx.io.write_unpublished(path, data)
    return len(data)
