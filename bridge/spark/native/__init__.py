"""Native reads: splits that need no merge read by Spark's own Parquet reader.

- `extension`: the small JVM rule and its Python planner (`dts.table`, reads by name);
- `scan`: `dts.table`, batch splits as Parquet scans; `_stream`: file-tier micro-batches as Spark's
  own scans.

Imports within bridge.spark: errors, options, read, stream.
"""
