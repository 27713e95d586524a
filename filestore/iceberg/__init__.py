"""Iceberg metadata beside a dts table (table option ``metadata.iceberg.storage``), so
that engines reading Iceberg (pyiceberg, DuckDB, Spark, Trino) read dts's own files."""

from filestore.iceberg.sync import IcebergSync, sync_iceberg

__all__ = ["IcebergSync", "sync_iceberg"]
