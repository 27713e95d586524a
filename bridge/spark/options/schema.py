"""Schema conversion between a table's Arrow schema and Spark, and batch conforming.

Spark's Arrow reader expects exactly the types Spark itself would produce (e.g.
timestamps in microseconds with tz UTC, large or small strings as Spark picks),
so every batch leaving `read()` is cast to the Arrow form of the Spark schema.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import LongType, StringType, StructField, StructType

from bridge.spark.options import BARRIER, METADATA_COLUMNS, ROW_KIND
from bridge.spark.options.habits import CHANGE_TYPE, with_change_type


def spark_schema(
    arrow: pa.Schema, *, metadata_columns: bool, change_type: bool = False
) -> StructType:
    """The Spark schema of a table (plus `_row_kind`, `_barrier`, Delta's `_change_type`)."""
    plain = pa.schema([f for f in arrow if f.name not in (*METADATA_COLUMNS, CHANGE_TYPE)])
    struct = from_arrow_schema(plain, prefer_timestamp_ntz=False)
    if metadata_columns:
        struct = StructType(
            [*struct.fields, StructField(ROW_KIND, StringType()), StructField(BARRIER, LongType())]
        )
    if change_type:
        struct = StructType([*struct.fields, StructField(CHANGE_TYPE, StringType())])
    return struct


def spark_arrow_schema(struct: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for batches of `struct`."""
    return to_arrow_schema(struct, timezone="UTC")


def conform(batch: pa.RecordBatch | pa.Table, target: pa.Schema) -> pa.RecordBatch:
    """Select and cast `batch`'s columns to `target` (missing columns become nulls).

    Delta's `_change_type` is derived here from `_row_kind`, so every path (changes,
    file, log and hybrid streams) fills it the same way.
    """
    names = batch.schema.names
    if CHANGE_TYPE in target.names and CHANGE_TYPE not in names and ROW_KIND in names:
        batch = with_change_type(batch, ROW_KIND)
    n = batch.num_rows
    cols = []
    for field in target:
        if field.name in batch.schema.names:
            col = batch.column(field.name)
            if isinstance(col, pa.ChunkedArray):
                col = col.combine_chunks()
            cols.append(col if col.type == field.type else col.cast(field.type, safe=False))
        else:
            cols.append(pa.nulls(n, field.type))
    return pa.RecordBatch.from_arrays(cols, schema=target)


def table_columns(struct: StructType) -> list[str]:
    """Columns of `struct` that are real table columns (metadata columns excluded)."""
    return [f.name for f in struct.fields if f.name not in (*METADATA_COLUMNS, CHANGE_TYPE)]
