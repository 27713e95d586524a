"""Reading a `dts` table in Spark: planning on the driver, reading in the executors.

- FileStore scans: `plan_scan` (driver: the read context, the input partitions) and
  `scan` (executors), with `_filters` for pushdown;
- the Kafka log tier: `plan_log` (barrier markers, admission), `log` (executors),
  `log_state` (an upsert log read as a full changelog), `kafka_access`;
- `parts`: what the driver hands the executors; `batch`: the batch reader.

Executors unpickle readers by reference, so this package's face imports nothing: a
task pays only for the modules its reader names.

Imports within bridge.spark: errors, options.
"""
