"""Iceberg position delete files made from what dts itself skips in a data file: the
rows its deletion vector deletes and its retraction rows (-U, -D).

Position deletes (format version 2), not Iceberg v3 deletion vectors: every Iceberg
reader here (pyiceberg 0.12, DuckDB 1.4, Spark's runtime) reads them, and a file's
deletes are written once, under a name made of the data file and the positions, so a
snapshot whose vector did not change reuses its predecessor's file.

A data file's deletes are a chain (``DeleteChain``): its first delete file holds every
position skipped when it was written, each later one only what the vector gained since
the one before; a snapshot names the whole chain, readers apply the union. A commit
then writes the positions it deleted, not every position so far (rewriting those was
most of what the metadata cost a commit on a table with deletion vectors). A chain
holds at most ``MAX_CHAIN`` files: a reader opens each, so the next growth is written
whole and starts a new chain. Older delete files stay named by the snapshots that named
them and go when the last of those expires (``IcebergSync._clean``).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from filestore.format.data_file import DataFileMeta
from filestore.format.row_kind import INSERT, UPDATE_AFTER, VALUE_KIND
from filestore.iceberg.manifests import DELETE_FILE_PATH_ID, DELETE_POS_ID
from filestore.state.context import TableContext
from filestore.state.deletion_vectors import added_positions, deleted_positions

#: delete files one data file's chain holds at most: each is a file a reader opens (and
#: DuckDB reads them one by one), while writing the growth whole costs a commit about
#: 0.3 ms more per 10,000 positions (the bench's 10k-row commits: 2-3 ms against 0.8)
MAX_CHAIN = 4

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


@dataclass(frozen=True, eq=False)  # its arrays have no equality of one bool
class DeleteChain:
    """The position delete files that together hold what dts skips in one data file
    whose deletion vector is ``vector``: the first every position skipped when it was
    written, each later one what the vector gained since the one before."""

    vector: bytes  # the data file's deletion vector the files cover (b"": none)
    retractions: np.ndarray | None  # its retraction rows, once read (None: not yet)
    files: tuple[tuple[str, int, int], ...]  # (name, positions, size), oldest first


def retraction_rows(ctx: TableContext, path: str) -> np.ndarray:
    """Row positions of a data file's retractions (-U, -D): sorted, int64."""
    with ctx.io.fs.open_input_file(path) as f:
        kinds = pq.read_table(f, columns=[VALUE_KIND]).column(VALUE_KIND)
    kind = np.asarray(kinds.to_numpy(zero_copy_only=False))
    return np.flatnonzero((kind != INSERT) & (kind != UPDATE_AFTER)).astype(np.int64)


def skipped_rows(
    ctx: TableContext, path: str, meta: DataFileMeta, retractions: np.ndarray | None = None
) -> np.ndarray:
    """Row positions of a data file that dts does not read (sorted, unique, int64)."""
    deleted = deleted_positions(meta).astype(np.int64)
    if not meta.delete_row_count:
        return deleted
    if retractions is None:
        retractions = retraction_rows(ctx, path)
    return np.union1d(deleted, retractions)


def whole_chain(ctx: TableContext, directory: str, path: str, meta: DataFileMeta) -> DeleteChain:
    """A chain of one delete file holding every position dts skips in the data file."""
    retractions = retraction_rows(ctx, path) if meta.delete_row_count else None
    skipped = skipped_rows(ctx, path, meta, retractions)
    name = f"{delete_file_prefix(meta)}{len(skipped)}.parquet"
    size = write_position_deletes(ctx, f"{directory}/{name}", path, skipped)
    return DeleteChain(meta.deletion_vector, retractions, ((name, len(skipped), size),))


def grown_chain(
    ctx: TableContext, directory: str, path: str, meta: DataFileMeta, chain: DeleteChain
) -> DeleteChain | None:
    """``chain`` and a delete file of what ``meta``'s vector gained over the chain's;
    None when the vector lost positions (a rollback took them back): a chain only grows."""
    added = added_positions(chain.vector, meta.deletion_vector)
    if added is None:
        return None
    retractions = chain.retractions
    if meta.delete_row_count:  # already in the chain's first file: never twice
        if retractions is None:
            retractions = retraction_rows(ctx, path)
        added = np.setdiff1d(added, retractions, assume_unique=True)
    files = chain.files
    if len(added):
        name = f"{delete_file_prefix(meta)}{_crc(chain.vector)}-{len(added)}.parquet"
        size = write_position_deletes(ctx, f"{directory}/{name}", path, added)
        files = (*files, (name, len(added), size))
    return DeleteChain(meta.deletion_vector, retractions, files)


def delete_file_prefix(meta: DataFileMeta) -> str:
    """``deletes-<data file>-<vector's crc>-``, then the positions' count: a data file's
    retraction rows never change, so the name changes exactly when its vector does. A
    chain's later file inserts the crc of the vector it grew from before the count."""
    stem = meta.file_name.rsplit(".", 1)[0]
    return f"deletes-{stem}-{_crc(meta.deletion_vector)}-"


def _crc(vector: bytes) -> str:
    return f"{zlib.crc32(vector):08x}"


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
    # a third of the time and a sixth of the bytes of plain zstd for 60k positions.
    # Neither zstd nor statistics on top: they doubled the write (0.37 against 0.68 ms
    # for 10k positions, 1.0 against 2.2 for 60k) for a quarter of the bytes at most,
    # and no reader here skips within a delete file (the manifest bounds its path)
    file_path = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(len(pos), dtype=np.int32)), pa.array([data_path], pa.string())
    )
    rows = pa.table({"file_path": file_path, "pos": pos}, schema=_WRITE_SCHEMA)
    sink = pa.BufferOutputStream()
    pq.write_table(
        rows,
        sink,
        compression="none",
        write_statistics=False,
        use_dictionary=["file_path"],
        column_encoding={"pos": "DELTA_BINARY_PACKED"},
        store_schema=False,  # readers see file_path as the string DELETE_SCHEMA says
    )
    data = sink.getvalue().to_pybytes()
    ctx.io.write_unpublished(path, data)
    return len(data)
