"""Catalog: databases and tables under one warehouse (a local path or any pyarrow URI)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from filestore.errors import (
    DatabaseNotEmpty,
    DatabaseNotFound,
    FileStoreError,
    InvalidIdentifier,
    TableAlreadyExists,
    TableNotFound,
)
from filestore.format.identifiers import RULES, check_identifier
from filestore.format.manifest import ParsedManifests
from filestore.format.paths import TablePaths
from filestore.format.schema import SchemaManager, build_schema
from filestore.io.fileio import FileIO, resolve_filesystem
from filestore.table import Table

DEFAULT_DATABASE = "default"
_DB_SUFFIX = ".db"
#: parsed manifest files a catalog keeps for all its tables (a table's snapshot names a
#: few: the worker's table with 4 buckets and 5 levels, about 20)
MANIFESTS_KEPT = 1024


def split_name(name: str) -> tuple[str, str]:
    """'db.table' -> ('db', 'table'); 'table' -> ('default', 'table')."""
    parts = name.split(".")
    if len(parts) == 1:
        db, table = DEFAULT_DATABASE, parts[0]
    elif len(parts) == 2:
        db, table = parts
    else:
        raise InvalidIdentifier(
            f"table name {name!r} must be 'table' or 'db.table', each part matching "
            f"{RULES['table'].text}"
        )
    check_identifier("database", db)
    check_identifier("table", table)
    return db, table


class Catalog:
    """Databases are ``<warehouse>/<db>.db``; tables are directories inside them.

    A table name is ``'table'`` (in database ``default``) or ``'db.table'``; each part
    matches ``[A-Za-z0-9][A-Za-z0-9_-]*`` (InvalidIdentifier otherwise).

    Args:
        warehouse: the root directory: a local path or a URI pyarrow understands
            (``s3://bucket/prefix``, ``gs://...``, ``file:///...``).
        filesystem: the pyarrow filesystem holding the warehouse (``warehouse`` is then
            a path in it); None derives it from ``warehouse``.

    Example:
        >>> import pyarrow as pa
        >>> from filestore import Catalog
        >>> catalog = Catalog("/tmp/warehouse")
        >>> orders = catalog.create_table(
        ...     "shop.orders",
        ...     pa.schema([("id", pa.int64()), ("day", pa.string()), ("amount", pa.float64())]),
        ...     primary_key=["id", "day"],
        ...     partition_by=["day"],
        ...     options={"bucket": "4"},
        ... )
        >>> catalog.list_tables("shop")
        ['shop.orders']
    """

    def __init__(self, warehouse: str, filesystem: pafs.FileSystem | None = None) -> None:
        fs, root = resolve_filesystem(str(warehouse), filesystem)
        self.io = FileIO(fs)
        self.root = root
        self.warehouse = str(warehouse)
        # parsed manifests, shared by every table this catalog opens (immutable files)
        self.manifests = ParsedManifests(max_files=MANIFESTS_KEPT)

    def __repr__(self) -> str:
        return f"Catalog({self.warehouse!r})"

    def _db_path(self, db: str) -> str:
        return f"{self.root}/{db}{_DB_SUFFIX}"

    def table_path(self, name: str) -> str:
        """Where a table's directory is (whether or not the table exists).

        Args:
            name: ``'table'`` or ``'db.table'``.

        Returns:
            The directory path inside the warehouse's filesystem.

        Raises:
            InvalidIdentifier: the name breaks the naming rule.
        """
        db, table = split_name(name)
        return f"{self._db_path(db)}/{table}"

    # -- databases ------------------------------------------------------
    def list_databases(self) -> list[str]:
        """Every database of the warehouse.

        Returns:
            The database names, sorted.
        """
        return sorted(
            i.base_name[: -len(_DB_SUFFIX)]
            for i in self.io.list_dir(self.root)
            if i.type == pafs.FileType.Directory and i.base_name.endswith(_DB_SUFFIX)
        )

    def create_database(self, db: str, ignore_if_exists: bool = True) -> None:
        """Create a database (``create_table`` creates its database too).

        Args:
            db: the database name.
            ignore_if_exists: False raises when it exists already.

        Raises:
            InvalidIdentifier: the name breaks the naming rule.
            FileStoreError: it exists and ``ignore_if_exists`` is False.
        """
        split_name(f"{db}.x")
        path = self._db_path(db)
        if self.io.exists(path) and not ignore_if_exists:
            raise FileStoreError(f"database {db} exists already")
        self.io.mkdirs(path)

    def drop_database(self, db: str, cascade: bool = False) -> None:
        """Delete a database directory.

        Args:
            db: the database name.
            cascade: drop its tables too; False refuses a database that has tables.

        Raises:
            DatabaseNotFound: no such database.
            DatabaseNotEmpty: it has tables and ``cascade`` is False.
        """
        if db not in self.list_databases():
            raise DatabaseNotFound(f"database {db} does not exist")
        if self.list_tables(db) and not cascade:
            raise DatabaseNotEmpty(
                f"database {db} still has tables; drop them or pass cascade=True"
            )
        self.io.delete_dir(self._db_path(db))

    # -- tables ---------------------------------------------------------
    def table_exists(self, name: str) -> bool:
        """Whether the table exists (its directory holds a schema).

        Args:
            name: ``'table'`` or ``'db.table'``.

        Returns:
            True if it exists.

        Raises:
            InvalidIdentifier: the name breaks the naming rule.
        """
        return bool(SchemaManager(self.io, TablePaths(self.table_path(name))).list_ids())

    def create_table(
        self,
        name: str,
        schema: pa.Schema,
        primary_key: Sequence[str] | None = None,
        partition_by: Sequence[str] | None = None,
        options: Mapping[str, str] | None = None,
        *,
        comment: str | None = None,
        ignore_if_exists: bool = False,
    ) -> Table:
        """Create a table (and its database if needed).

        Args:
            name: ``'table'`` or ``'db.table'``.
            schema: the columns; primary-key columns are made non-nullable.
            primary_key: the primary-key columns (an LSM table whose rows upsert and
                delete by key); None or empty makes an append-only table.
            partition_by: the partition columns (a directory per value combination).
            options: table options, string to string (``CoreOptions`` lists them).
            comment: a free-text description stored with the schema.
            ignore_if_exists: return the existing table instead of raising.

        Returns:
            The new table (or the existing one with ``ignore_if_exists``).

        Raises:
            InvalidIdentifier: the name or a column name breaks its naming rule.
            SchemaError: the schema, keys or options do not fit together.
            InvalidOption: an unknown option or a bad value.
            TableAlreadyExists: it exists and ``ignore_if_exists`` is False.
        """
        db, _ = split_name(name)
        full = self.full_name(name)
        table_schema = build_schema(schema, primary_key, partition_by, options, comment)
        path = self.table_path(name)
        self.io.mkdirs(self._db_path(db))
        if not SchemaManager(self.io, TablePaths(path)).commit(table_schema):
            if ignore_if_exists:
                return self.get_table(name)
            raise TableAlreadyExists(f"table {full} exists already")
        return Table(full, self.io, path, self.manifests)

    def full_name(self, name: str) -> str:
        """A table name with its database.

        Args:
            name: ``'table'`` or ``'db.table'``.

        Returns:
            ``'db.table'`` (``'default.table'`` for a bare name).

        Raises:
            InvalidIdentifier: the name breaks the naming rule.
        """
        db, table = split_name(name)
        return f"{db}.{table}"

    def get_table(self, name: str) -> Table:
        """Open a table (cheap: nothing is read until it is used).

        Args:
            name: ``'table'`` or ``'db.table'``.

        Returns:
            The table.

        Raises:
            InvalidIdentifier: the name breaks the naming rule.
            TableNotFound: no such table.
        """
        full = self.full_name(name)
        if not self.table_exists(name):
            raise TableNotFound(f"table {full} does not exist in {self.warehouse}")
        return Table(full, self.io, self.table_path(name), self.manifests)

    def list_tables(self, db: str | None = None) -> list[str]:
        """Full names ('db.table') of the tables in db, or in every database.

        Args:
            db: the database; None lists every database's tables.

        Returns:
            The full names, sorted.
        """
        dbs = [db] if db is not None else self.list_databases()
        names = []
        for d in dbs:
            for info in self.io.list_dir(self._db_path(d)):
                if info.type == pafs.FileType.Directory and self.table_exists(
                    f"{d}.{info.base_name}"
                ):
                    names.append(f"{d}.{info.base_name}")
        return sorted(names)

    def drop_table(self, name: str, ignore_if_missing: bool = False) -> None:
        """Delete a table's directory with every file in it (no undo).

        Args:
            name: ``'table'`` or ``'db.table'``.
            ignore_if_missing: do nothing for a missing table instead of raising.

        Raises:
            InvalidIdentifier: the name breaks the naming rule.
            TableNotFound: no such table and ``ignore_if_missing`` is False.
        """
        if not self.table_exists(name):
            if ignore_if_missing:
                return
            raise TableNotFound(f"table {self.full_name(name)} does not exist")
        self.io.delete_dir(self.table_path(name))

    def rename_table(self, old: str, new: str) -> Table:
        """Rename (a directory move: atomic on local disks, a copy on object stores).

        Args:
            old: the table's current name.
            new: its new name (possibly in another database, created if needed).

        Returns:
            The table under its new name.

        Raises:
            InvalidIdentifier: a name breaks the naming rule.
            TableNotFound: ``old`` does not exist.
            TableAlreadyExists: ``new`` exists already.
        """
        if not self.table_exists(old):
            raise TableNotFound(f"table {self.full_name(old)} does not exist")
        if self.table_exists(new):
            raise TableAlreadyExists(f"table {self.full_name(new)} exists already")
        db, _ = split_name(new)
        self.io.mkdirs(self._db_path(db))
        self.io.move(self.table_path(old), self.table_path(new))
        return self.get_table(new)
