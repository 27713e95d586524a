"""TableContext: what every FileStore operation needs to know about one table.

Its name, file IO, directory layout, the schema / snapshot / manifest managers,
and the latest schema with its parsed options. Operations (scan, read, write,
commit, compaction, expire, changes, rollback, tags, ...) take a context, never
the ``Table`` facade, so the facade can sit on top of all of them.

Nothing here caches snapshots across calls, and the schema is looked up on
every access (a new version published by another process is seen at once); a
schema version's file is parsed only once (``SchemaManager`` keeps the parsed
version while its file is unchanged), and so are its options. Immutable files are
kept once parsed: manifests (``ManifestStore``) and, for lookups, decoded data files
(``file_cache``).
"""

from __future__ import annotations

import pyarrow as pa

from filestore.errors import TableNotFound
from filestore.format.manifest import ManifestEntry, ManifestStore, ParsedManifests, merge_entries
from filestore.format.options import CoreOptions
from filestore.format.paths import TablePaths
from filestore.format.schema import SchemaManager, TableSchema
from filestore.format.snapshot import Snapshot, SnapshotManager
from filestore.io.file_cache import FileCache
from filestore.io.fileio import FileIO

Partition = tuple[str | None, ...]


class TableContext:
    """One table's location, IO and metadata managers (no operations)."""

    def __init__(
        self, name: str, io: FileIO, root: str, manifests: ParsedManifests | None = None
    ) -> None:
        self.name = name
        self.io = io
        self.paths = TablePaths(root)
        self.schema_manager = SchemaManager(io, self.paths)
        self.snapshot_manager = SnapshotManager(io, self.paths)
        # parsed manifests: the catalog's, shared by its handles, when it opened this one
        self.manifest_store = ManifestStore(io, self.paths, manifests)
        # decoded data files for lookups (filestore.io.file_cache): a handle that commits
        # again and again reads each file once
        self.file_cache = FileCache()
        # what this handle's last Iceberg sync wrote (filestore.iceberg.state.SyncState):
        # held here so it lives and dies with the handle; typed loosely, as the Iceberg
        # room stands above this one
        self.iceberg_sync: object | None = None

    # -- schema ---------------------------------------------------------
    @property
    def schema(self) -> TableSchema:
        """The latest schema version (looked up on every access, parsed once)."""
        schema = self.schema_manager.latest()
        if schema is None:
            raise TableNotFound(
                f"table {self.name} does not exist (no schema at {self.paths.root})"
            )
        return schema

    @property
    def options(self) -> CoreOptions:
        return self.schema.core_options

    @property
    def arrow_schema(self) -> pa.Schema:
        return self.schema.arrow_schema

    @property
    def primary_key(self) -> list[str]:
        return list(self.schema.primary_key)

    @property
    def partition_keys(self) -> list[str]:
        return list(self.schema.partition_keys)

    @property
    def bucket_keys(self) -> list[str]:
        """Columns of the bucket hash (also the LogStore's partitioner keys)."""
        return self.schema.bucket_keys

    @property
    def num_buckets(self) -> int:
        """The table's bucket count (option ``bucket``)."""
        return self.schema.num_buckets

    # -- files ----------------------------------------------------------
    def data_path(self, partition: Partition, bucket: int, file_name: str) -> str:
        """Path of a data or changelog file of one partition/bucket."""
        return self.paths.data_file(self.schema.partition_keys, partition, bucket, file_name)

    def live_entries(self, snapshot: Snapshot | None) -> list[ManifestEntry]:
        """The data files live at a snapshot (its base and delta manifests merged)."""
        if snapshot is None:
            return []
        return merge_entries(
            self.manifest_store.read_entries(
                [snapshot.base_manifest_list, snapshot.delta_manifest_list]
            )
        )
