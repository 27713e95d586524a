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


def spark_schema(arrow: pa.Schema, *, metadata_columns: bool) -> StructType:
    """The Spark schema of a table (plus `_row_kind`, `_barrier` when asked)."""
    plain = pa.schema([f for f in arrow if f.name not in METADATA_COLUMNS])
    struct = from_arrow_schema(plain, prefer_timestamp_ntz=False)
    if metadata_columns:
        struct = StructType(
            [*struct.fields, StructField(ROW_KIND, StringType()), StructField(BARRIER, LongType())]
        )
    return struct


def spark_arrow_schema(struct: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for batches of `struct`."""
    return to_arrow_schema(struct, timezone="UTC")


def conform(batch: pa.RecordBatch | pa.Table, target: pa.Schema) -> pa.RecordBatch:
    """Select and cast `batch`'s columns to `target` (missing columns become nulls)."""
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
    return [f.name for f in struct.fields if f.name not in METADATA_COLUMNS]
