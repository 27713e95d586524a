"""Writing a `dts` table from Spark: batch and streaming sinks, staged CTAS, jobs.

- `sink`: batch append/overwrite and the streaming sink; `_log_sink`: into the log tier;
- `_tasks`: what every executor task writes and the driver commits as one snapshot;
- `staged`: the writer of an atomic CREATE / REPLACE TABLE AS SELECT;
- `meta_jobs`: registering the jobs with the MetaService; `_checkpoint`: what the
  streaming sink reads back from Spark's checkpoint.

Imports within bridge.spark: errors, options, stream.
"""
