"""Whole data files read by polars' Parquet reader, for reads that need no merge.

On this project's data files polars decodes about twice as fast as pyarrow: strings
decode into views of the pages instead of being copied, and the files of a split are
read in parallel. It is used only where the Arrow types it hands back cast to the
table's types exactly (``polars_exact``), on local files, and for files read whole;
everything else (row-group selection by key statistics, older schema versions,
nested and rarer types, remote filesystems) stays with pyarrow's reader.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from filestore.errors import DataFileUnreadable
from filestore.format.row_kind import INSERT, UPDATE_AFTER, VALUE_KIND
from filestore.threads import decode_slot


def polars_exact(t: pa.DataType) -> bool:
    """Whether polars reads a column of Arrow type ``t`` into a type that casts back to
    ``t`` without changing a value (``tests/filestore/test_polars_parquet.py`` proves
    each). Seconds timestamps, time32, durations, float16, decimal256, fixed-size
    binary and nested types are left to pyarrow."""
    return bool(
        pa.types.is_boolean(t)
        or pa.types.is_integer(t)
        or pa.types.is_float32(t)
        or pa.types.is_float64(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_date32(t)
        or (pa.types.is_timestamp(t) and t.unit != "s")
        or pa.types.is_time64(t)
        or pa.types.is_decimal128(t)
    )


def read_frame(paths: Sequence[str], columns: Sequence[str]) -> pl.DataFrame:
    """The files' ``columns``, concatenated in order, as one polars frame."""
    try:
        # glob and hive off: a data file's path is a path, and partition directories
        # (k=v) must not become columns; a slot a core bounds polars' threads
        # (filestore.threads)
        with decode_slot():
            return pl.read_parquet(
                list(paths), columns=list(columns), glob=False, hive_partitioning=False
            )
    except pl.exceptions.PolarsError as exc:
        raise DataFileUnreadable(
            f"cannot read the data files {', '.join(paths)}: {exc}; a damaged data file "
            "needs the table rolled back to a snapshot without it"
        ) from exc


def read_whole_files(
    paths: Sequence[str],
    schema: pa.Schema,
    keep: np.ndarray | None = None,
    adds_only: bool = False,
) -> pa.Table:
    """The files' columns of ``schema`` (the types they were written with), concatenated
    in order, in those types.

    ``keep`` masks the concatenated rows (deletion vectors); ``adds_only`` also drops
    retractions by ``_VALUE_KIND``. Both filter before the rows become Arrow, where a
    filter would copy every string.
    """
    columns = schema.names
    wanted = [*columns, VALUE_KIND] if adds_only and VALUE_KIND not in columns else columns
    frame = read_frame(paths, wanted)
    mask = None if keep is None else pl.Series(keep)
    if adds_only:
        adds = frame.get_column(VALUE_KIND).is_in([INSERT, UPDATE_AFTER])
        mask = adds if mask is None else mask & adds
    if mask is not None and not mask.all():
        frame = frame.filter(mask)
    return as_written(frame.select(columns), schema)


def as_written(frame: pl.DataFrame, schema: pa.Schema) -> pa.Table:
    """``frame`` in Arrow, cast to the types its files were written with (polars hands
    strings back as large_string, times as nanoseconds): what pyarrow's reader returns,
    so nothing downstream depends on which reader ran."""
    return frame.to_arrow().cast(schema)
