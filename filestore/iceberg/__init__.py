"""Iceberg metadata beside a dts table (table option ``metadata.iceberg.storage``), so
that engines reading Iceberg (pyiceberg, DuckDB, Spark, Trino) read dts's own files.

Imports within filestore: errors, format, read, state.
"""

from filestore.iceberg.sync import IcebergSync, drop_iceberg_metadata, sync_iceberg

__all__ = ["IcebergSync", "drop_iceberg_metadata", "sync_iceberg"]
