"""Columnar LSM FileStore: catalog, schema, snapshots, manifests, writer, merge-on-read reader."""

from filestore.catalog import Catalog
from filestore.commit.messages import CommitMessage
from filestore.commit.properties import CommitProperties
from filestore.errors import (
    BarrierOrderError,
    CommitConflict,
    FileStoreError,
    InvalidIdentifier,
    InvalidOption,
    SchemaError,
    SnapshotNotFound,
    TableAlreadyExists,
    TableNotFound,
)
from filestore.format.bucket import bucket_ids
from filestore.format.data_file import DataFileMeta
from filestore.format.options import CoreOptions
from filestore.format.schema import TableSchema
from filestore.format.snapshot import CommitKind, Snapshot
from filestore.maintenance.table_commit import TableCommit
from filestore.read.scan import Split, TableScan
from filestore.table import Table
from filestore.write.table_write import TableWrite

__all__ = [
    "BarrierOrderError",
    "Catalog",
    "CommitConflict",
    "CommitKind",
    "CommitMessage",
    "CommitProperties",
    "CoreOptions",
    "DataFileMeta",
    "FileStoreError",
    "InvalidIdentifier",
    "InvalidOption",
    "SchemaError",
    "Snapshot",
    "SnapshotNotFound",
    "Split",
    "Table",
    "TableAlreadyExists",
    "TableCommit",
    "TableNotFound",
    "TableScan",
    "TableSchema",
    "TableWrite",
    "bucket_ids",
]
