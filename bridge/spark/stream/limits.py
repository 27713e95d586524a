"""Admission limits of the `dts` stream readers (driver side, `latestOffset`)."""

from __future__ import annotations

from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    ReadMaxRows,
)

from bridge.spark.options import ReadOptions


def default_read_limit(opts: ReadOptions) -> ReadLimit:
    if opts.max_rows_per_trigger is not None:
        return ReadMaxRows(opts.max_rows_per_trigger)
    if opts.max_barriers_per_trigger is not None:
        return ReadMaxFiles(opts.max_barriers_per_trigger)
    return ReadAllAvailable()


def limits(opts: ReadOptions, limit: ReadLimit) -> tuple[int | None, int | None]:
    """(max rows, max barriers) for one `latestOffset` call; both None for ReadAllAvailable."""
    if isinstance(limit, ReadAllAvailable):
        return None, None
    rows = limit.max_rows if isinstance(limit, ReadMaxRows) else opts.max_rows_per_trigger
    units = limit.max_files if isinstance(limit, ReadMaxFiles) else opts.max_barriers_per_trigger
    return rows, units
