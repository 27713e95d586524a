"""Streaming reads of a `dts` table, one reader per `option("tier", ...)`.

- `by_tier`: choosing the reader, reporting set-up errors;
- `file`: the FileStore tier, micro-batches of whole snapshots; `_log`: the Kafka log
  tier, micro-batches ending on barrier markers; `_hybrid`: a snapshot, then the log;
- `offsets`: the source's offsets (read back by the sink); `limits`: admission limits.

Imports within bridge.spark: errors, options, read.
"""
