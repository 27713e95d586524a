"""Exceptions raised by the FileStore; each names what went wrong and what to do."""

from __future__ import annotations


class FileStoreError(Exception):
    """Base class of every FileStore error."""


class TableNotFound(FileStoreError):
    """The named table (or database) does not exist."""


class TableAlreadyExists(FileStoreError):
    """A table of that name exists already."""


class DatabaseNotFound(FileStoreError):
    """The named database does not exist."""


class DatabaseNotEmpty(FileStoreError):
    """A database still holds tables."""


class SchemaError(FileStoreError):
    """Data or a schema change does not fit the table's schema."""


class CommitConflict(FileStoreError):
    """A concurrent commit changed what this commit depends on; redo the write."""


class SnapshotNotFound(FileStoreError):
    """The requested snapshot (id, barrier, time or tag) does not exist."""


class InvalidOption(FileStoreError):
    """A table option has a value that cannot be used."""


class BarrierOrderError(CommitConflict):
    """A commit's barrier is not greater than the table's latest barrier."""


class InvalidIdentifier(FileStoreError):
    """A name (database, table, column, tag, topic) breaks the rule for its kind."""


class TagError(FileStoreError):
    """A tag cannot be created or deleted as asked."""


class StagingError(FileStoreError):
    """A staged table could not be committed or aborted; the message says what is left."""


class ConditionalCreateUnsupported(FileStoreError):
    """The object store refused conditional writes (``If-None-Match``)."""


class RetractionNotSupported(InvalidOption):
    """An aggregation table got a -U/-D row for a column whose function cannot retract."""


class DataFileUnreadable(FileStoreError):
    """A data file of the table is not valid Parquet (damaged, or not written by a writer)."""


class IcebergMetadataError(FileStoreError):
    """Iceberg metadata could not be written for a table (the dts commit stands)."""
