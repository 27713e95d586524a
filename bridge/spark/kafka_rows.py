"""Spark's own Kafka source on a dts topic: typed changelog rows with `_row_kind` and `_barrier`.

    df = (spark.read.format("kafka")                    # or spark.readStream
          .option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", "dts.db.orders")
          .option("startingOffsets", "earliest")
          .option("kafka.isolation.level", "read_committed")   # see committed barriers only
          .option("includeHeaders", "true")                     # barrier markers are headers
          .load())
    changes = changelog_rows(df, table)                 # table: filestore Table or LogSpec

The result has the table's columns with their types, `_row_kind` (+I, -U, +U, -D)
following the debezium mapping (`c`/`r` -> +I, `u` -> -U of `before` then +U of
`after`, `d` -> -D of `before`, or of the key when a delete carries no `before`),
`_barrier`, and the record's `_partition`, `_offset` and `_timestamp`.

Primary-key tables log in upsert mode (`log.changelog-mode` auto): +I and +U both
arrive as `op:"c"`, so they come out as `+I` here (apply them as upserts by key);
-U is not stored. Tables with `log.changelog-mode=all` carry every kind.

The barrier of a record is not in the record: it is the id of the next barrier
marker in its partition (a marker is a record with no key and no value and the
header `dts.barrier`). `changelog_rows` computes it with a window over
(partition, offset) and drops the markers; a record that no marker follows yet in
the DataFrame gets a null `_barrier` (its barrier is still open, or the read
stopped before the marker). Windows need a bounded DataFrame: on a stream, call it
per micro-batch in `foreachBatch` (with `read_committed`, a micro-batch ends on a
committed transaction and so on whole barriers, unless `maxOffsetsPerTrigger`
cuts one), or pass `barrier=False` to get the rows without `_barrier`.

Records that are not valid debezium-json for the table are kept, with a null
`_row_kind` and every column null: filter `_row_kind IS NULL` to see them (the
`dts` worker sends them to `<topic>.dlq`). Tombstones (null value, no marker
header) are skipped, as every debezium consumer does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from bridge.spark.errors import KafkaRowsError
from bridge.spark.options import BARRIER, ROW_KIND
from bridge.spark.options.schema import spark_schema

if TYPE_CHECKING:
    from filestore import Table

MARKER_HEADER = "dts.barrier"
KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
#: JSON forms of the LogStore codec (decimals as strings, timestamps with a space or a
#: `T`, with or without an offset) are all accepted by Spark's parser with these options
_JSON_OPTIONS = {
    "mode": "PERMISSIVE",
    "enableDateTimeParsingFallback": "true",
    "timeZone": "UTC",
    "allowNumericLeadingZeros": "false",
}


def _spec(table: Table) -> Any:
    from logstore.spec import LogSpec

    if isinstance(table, LogSpec):
        return table
    from bridge.tables import log_spec_for

    return log_spec_for(table)


def _marker_barrier(headers: Column) -> Column:
    found = F.filter(headers, lambda h: h["key"] == F.lit(MARKER_HEADER))
    return F.when(F.size(found) > 0, F.decode(found[0]["value"], "US-ASCII").cast("bigint"))


def envelope_schema(table: Table) -> StructType:
    """The debezium-json envelope of ``table``'s records as a Spark schema."""
    row = spark_schema(_spec(table).schema, metadata_columns=False)
    return StructType(
        [
            StructField("before", row),
            StructField("after", row),
            StructField("op", StringType()),
            StructField("ts_ms", LongType()),
        ]
    )


def changelog_rows(kafka_df: DataFrame, table: Table, *, barrier: bool = True) -> DataFrame:
    """Typed changelog rows of a dts topic read by Spark's Kafka source (see the module doc).

    ``table`` is a ``filestore`` Table (its log settings are used) or a ``LogSpec``.
    ``barrier=True`` needs a bounded DataFrame and ``includeHeaders=true`` on the source.
    """
    missing = [c for c in KAFKA_COLUMNS if c not in kafka_df.columns]
    if missing:
        raise KafkaRowsError(
            f"not a DataFrame of Spark's Kafka source (columns {missing} missing): "
            'load it with spark.read.format("kafka") or spark.readStream.format("kafka")'
        )
    has_headers = "headers" in kafka_df.columns
    if barrier and not has_headers:
        raise KafkaRowsError(
            'barrier markers are record headers: read with .option("includeHeaders", "true"), '
            "or pass barrier=False"
        )
    if barrier and kafka_df.isStreaming:
        raise KafkaRowsError(
            "_barrier needs a window over each partition's offsets, which a stream cannot "
            "run: call changelog_rows per micro-batch in foreachBatch, or pass barrier=False"
        )
    spec = _spec(table)
    env = envelope_schema(spec)
    row_type: StructType = env["after"].dataType  # type: ignore[assignment]
    names = row_type.fieldNames()

    marker = _marker_barrier(F.col("headers")) if has_headers else F.lit(None).cast("bigint")
    df = kafka_df.select(
        F.col("partition").alias("_partition"),
        F.col("offset").alias("_offset"),
        F.col("timestamp").alias("_timestamp"),
        F.col("key"),
        F.col("value"),
        F.when(F.col("value").isNull(), marker).alias("_marker"),
    )
    if barrier:
        after = (
            Window.partitionBy("_partition")
            .orderBy("_offset")
            .rowsBetween(Window.currentRow, Window.unboundedFollowing)
        )
        df = df.withColumn(BARRIER, F.first("_marker", ignorenulls=True).over(after))
    # markers and tombstones carry no row
    df = df.where(F.col("value").isNotNull())

    parsed = F.from_json(F.col("value").cast("string"), env, _JSON_OPTIONS)
    key_row = F.from_json(F.col("key").cast("string"), row_type, _JSON_OPTIONS)
    op = parsed["op"]
    # a delete without `before` (Debezium's key-only form, or upsert logs) is told by its key
    before = F.coalesce(parsed["before"], key_row)
    after_ok = parsed["after"].isNotNull()

    def image(kind: str, img: Column) -> Column:
        return F.struct(F.lit(kind).alias(ROW_KIND), img.alias("img"))

    images = (
        F.when(op.isin("c", "r") & after_ok, F.array(image("+I", parsed["after"])))
        .when(
            (op == "u") & after_ok & parsed["before"].isNotNull(),
            F.array(image("-U", parsed["before"]), image("+U", parsed["after"])),
        )
        .when((op == "d") & before.isNotNull(), F.array(image("-D", before)))
    )
    keep = [c for c in ("_partition", "_offset", "_timestamp", BARRIER) if c in df.columns]
    # explode_outer keeps an undecodable record as one row with a null _row_kind
    out = df.select(*keep, F.explode_outer(images).alias("_change"))
    return out.select(
        *[F.col("_change.img")[n].alias(n) for n in names],
        F.col(f"_change.{ROW_KIND}").alias(ROW_KIND),
        *keep,
    )


def kafka_source_options(
    bootstrap: str, topic: str, client_config: dict[str, str] | None = None
) -> dict[str, str]:
    """Options of Spark's Kafka source for a dts topic: committed barriers, headers on.

    ``client_config`` (e.g. from ``logstore.client_config``) adds Kafka client settings
    such as SASL/SSL; each key is passed to Spark prefixed with ``kafka.``.
    """
    from logstore.client_config import spark_kafka_options

    return {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "kafka.isolation.level": "read_committed",
        "includeHeaders": "true",
        "startingOffsets": "earliest",
        **spark_kafka_options(client_config or {}),
    }
