"""Which options the `dts` source and sink accept, and the error for every other one.

Spark hands a data source every `.option(...)` unchecked, so a misspelling would
silently do nothing. Every key is checked here against the options of its side
(read or write); an unknown key is an `OptionError` that names it and suggests the
closest valid key (difflib), and options users type from Delta Lake or Spark's Kafka
source are either honoured (see `bridge.spark.options.habits`) or refused with what to use.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from bridge.spark.errors import OptionError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Spark conf `spark.dts.<key>` -> default of option <key> for every read and write.
SESSION_CONF_PREFIX = "spark.dts."
SESSION_DEFAULTS = ("warehouse", "bootstrap", "meta.url", "meta.ca-file")


def session_defaults(spark: SparkSession) -> dict[str, str]:
    """The `spark.dts.*` confs that are set, as option defaults."""
    out: dict[str, str] = {}
    for key in SESSION_DEFAULTS:
        value = spark.conf.get(SESSION_CONF_PREFIX + key, None)
        if value:
            out[key] = str(value)
    return out


COMMON = (
    "warehouse",
    "path",
    "table",
    "bootstrap",
    "kafka.bootstrap.servers",
    "meta.url",
    "meta.ca-file",
    # no session default: a conf is every job's, and DTS_META_TOKEN is the session-wide way
    "meta.token",
)

READ = (
    *COMMON,
    "snapshot-id",
    "barrier",
    "timestamp",
    "tag",
    "changes",
    "columns",
    "metadata-columns",
    "tier",
    "scan.mode",
    "scan.snapshot-id",
    "scan.barrier",
    "scan.timestamp-millis",
    "maxRowsPerTrigger",
    "maxBarriersPerTrigger",
    "consumer-id",
    "log.poll-timeout",
    "log.normalize",
    "scan.merge-only",  # internal: dts.table's merge part (bridge.spark.native.scan)
    "scan.tasks",  # internal: how many tasks that merge part fills (the session's cores)
    "scan.native",  # false: the Python source reads it even where the extension could not
    # honoured habits (Delta Lake, Spark's Kafka source): see bridge.spark.options.habits
    "versionAsOf",
    "timestampAsOf",
    "readChangeFeed",
    "readChangeData",
    "startingVersion",
    "endingVersion",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsets",
    "maxOffsetsPerTrigger",
)

WRITE = (
    *COMMON,
    "create",
    "if-not-exists",
    "replace",
    "primary-key",
    "partition-by",
    "target.tier",
    "commit-user",
    "checkpointLocation",
    "barrier",
    "meta.sources",
    "meta.heartbeat-timeout-ms",
    # habits: Delta's schema evolution and DataFrameWriter.partitionBy
    "mergeSchema",
    "partitionBy",
)

# Options with a well-known meaning elsewhere that `dts` cannot honour: key -> what to use.
REFUSED = {
    "maxfilespertrigger": (
        "Delta's maxFilesPerTrigger counts data files; a dts micro-batch holds whole "
        "snapshots: use maxBarriersPerTrigger (snapshots per batch) or maxRowsPerTrigger"
    ),
    "maxbytespertrigger": (
        "a dts micro-batch is sized by rows or snapshots, not bytes: use maxRowsPerTrigger "
        "or maxBarriersPerTrigger"
    ),
    "minpartitions": (
        "Spark's Kafka minPartitions splits topic partitions; dts reads one Spark partition "
        "per bucket (raise the table's bucket count for more parallelism)"
    ),
    "endingoffsets": "batch reads of the log are not supported: read the FileStore tier",
    "subscribe": "dts reads the table's own topic: give the table name to load()",
    "failondataloss": "dts always fails on expired offsets; restart with tier=hybrid",
    "overwriteschema": (
        "dts never replaces a table's schema on write: use option('replace', 'true') "
        "(atomic REPLACE TABLE AS SELECT)"
    ),
}

# Keys Spark itself adds to a data source's options (a streaming write gets its
# `queryName`); accepted on either side and ignored.
SPARK_INTERNAL_PREFIXES = ("__",)
#: a read's Kafka client settings, named as Spark's Kafka source takes them (or librdkafka)
KAFKA_PREFIX = "kafka."
SPARK_PASSED = {"queryname"}


def _lowered(keys: Iterable[str]) -> dict[str, str]:
    return {k.lower(): k for k in keys}


_READ = _lowered(READ)
_WRITE = _lowered(WRITE)


def check_keys(keys: Iterable[str], side: str) -> None:
    """Raise `OptionError` for the first key the `side` ("read" or "write") does not know."""
    valid, other = (_READ, _WRITE) if side == "read" else (_WRITE, _READ)
    for key in keys:
        low = key.lower()
        if low in valid or low in SPARK_PASSED or low.startswith(SPARK_INTERNAL_PREFIXES):
            continue
        if side == "write" and low.startswith("table."):
            continue  # table options of a creating write (validated by the FileStore)
        if low.startswith(KAFKA_PREFIX):
            if side == "read":
                continue  # a Kafka client setting of the log tier's consumers
            raise OptionError(
                f"option {key!r}: a write into the log takes its Kafka client settings from "
                "DTS_KAFKA_CONFIG or DTS_KAFKA_* (spark.executorEnv.* on a cluster)"
            )
        if low in REFUSED:
            raise OptionError(f"option {key!r} is not supported by dts: {REFUSED[low]}")
        if low in other:
            raise OptionError(
                f"option {key!r} is a {'write' if side == 'read' else 'read'} option; "
                f"it does nothing on a {side}"
            )
        close = difflib.get_close_matches(low, list(valid), n=1, cutoff=0.6)
        hint = f"; did you mean {valid[close[0]]!r}?" if close else ""
        known = ", ".join(sorted(valid.values(), key=str.lower))
        raise OptionError(f"unknown {side} option {key!r}{hint} (valid options: {known})")
