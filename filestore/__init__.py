"""Columnar LSM FileStore: catalog, schema, snapshots, manifests, writer, merge-on-read reader."""

from filestore.bucket import bucket_ids
from filestore.catalog import Catalog
from filestore.commit_properties import CommitProperties
from filestore.data_file import DataFileMeta
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
from filestore.maintenance import TableCommit
from filestore.messages import CommitMessage
from filestore.options import CoreOptions
from filestore.scan import Split, TableScan
from filestore.schema import TableSchema
from filestore.snapshot import CommitKind, Snapshot
from filestore.table import Table
from filestore.write import TableWrite

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
