"""Strict options: every key checked, misspellings named with a suggestion (no Spark)."""

from __future__ import annotations

import re

import pytest

from bridge.spark.errors import OptionError
from bridge.spark.options import ReadOptions, WriteOptions
from bridge.spark.options.habits import ChangeFeed, parse_time_ms, starting_offsets

BASE = {"warehouse": "/w", "path": "db.t"}


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("startingOffset", "startingOffsets"),
        ("snapshot-idd", "snapshot-id"),
        ("scan.mod", "scan.mode"),
        ("maxRowPerTrigger", "maxRowsPerTrigger"),
    ],
)
def test_misspelled_read_option_names_the_closest(key: str, suggestion: str) -> None:
    with pytest.raises(
        OptionError, match=rf"unknown read option '{key}'.*did you mean '{suggestion}'"
    ):
        ReadOptions.parse({**BASE, key: "1"})


def test_misspelled_write_option_is_refused() -> None:
    with pytest.raises(OptionError, match=r"'primary-keys'.*did you mean 'primary-key'"):
        WriteOptions.parse({**BASE, "create": "true", "primary-keys": "id"})


def test_options_of_the_other_side_and_unsupported_habits_are_refused() -> None:
    with pytest.raises(OptionError, match="'create' is a write option"):
        ReadOptions.parse({**BASE, "create": "true"})
    with pytest.raises(OptionError, match="maxBarriersPerTrigger"):
        ReadOptions.parse({**BASE, "tier": "file", "maxFilesPerTrigger": "3"})
    with pytest.raises(OptionError, match="maxRowsPerTrigger"):
        ReadOptions.parse({**BASE, "tier": "file", "maxBytesPerTrigger": "1g"})
    with pytest.raises(OptionError, match="bucket"):
        ReadOptions.parse({**BASE, "tier": "log", "minPartitions": "8"})
    with pytest.raises(OptionError, match="tier"):
        ReadOptions.parse({**BASE, "startingOffsets": "latest"})  # batch / file tier
    with pytest.raises(OptionError, match="log"):
        ReadOptions.parse({**BASE, "tier": "file", "maxOffsetsPerTrigger": "10"})


def test_delta_and_kafka_habits_map_to_dts_options() -> None:
    assert ReadOptions.parse({**BASE, "versionAsOf": "1"}).snapshot_id == 1
    at = ReadOptions.parse({**BASE, "timestampAsOf": "2026-01-01 00:00:00"})
    assert at.timestamp == 1767225600000
    assert parse_time_ms("t", "1767225600000") == 1767225600000
    feed = ReadOptions.parse({**BASE, "readChangeFeed": "true", "startingVersion": "2"})
    assert feed.feed == ChangeFeed(starting_version=2) and feed.wants_metadata
    assert feed.scan_mode == "from-snapshot" and feed.scan_snapshot_id == 2
    with pytest.raises(OptionError, match="readChangeFeed"):
        ReadOptions.parse({**BASE, "startingVersion": "2"})
    with pytest.raises(OptionError, match="exactly one"):
        ReadOptions.parse({**BASE, "readChangeFeed": "true"})
    kafka = {"bootstrap": "127.0.0.1:9092"}
    log = ReadOptions.parse({**BASE, **kafka, "tier": "log", "startingOffsets": "latest"})
    assert log.start_offsets == "latest"
    assert starting_offsets('{"dts.db.t": {"0": 5, "1": -2}}', "dts.db.t") == {0: 5, 1: -2}
    with pytest.raises(OptionError, match="startingOffsets"):
        starting_offsets("{not json")
    # Spark passes a streaming query's name to its sink as an option
    assert WriteOptions.parse({**BASE, "queryName": "q1"}).common.table == "db.t"
    w = WriteOptions.parse({**BASE, "partitionBy": '["dt"]', "mergeSchema": "true"})
    assert w.partition_by == ["dt"] and w.merge_schema
    with pytest.raises(OptionError, match=r"spark\.dts\.bootstrap"):
        ReadOptions.parse({**BASE, "tier": "hybrid"})
    with pytest.raises(OptionError, match=r"log\.poll-timeout"):
        ReadOptions.parse({**BASE, "log.poll-timeout": "soon"})


SCRAM = {
    "kafka.bootstrap.servers": "127.0.0.1:9093",
    "kafka.security.protocol": "SASL_SSL",
    "kafka.sasl.mechanism": "SCRAM-SHA-512",
    "kafka.sasl.jaas.config": (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="reader" password="s3\\"cret";'
    ),
    "kafka.ssl.truststore.type": "PEM",
    "kafka.ssl.truststore.location": "/etc/kafka/ca.pem",
}


def test_a_reads_kafka_options_as_spark_s_kafka_source_takes_them_become_librdkafka_s() -> None:
    common = ReadOptions.parse({**BASE, "tier": "log", **SCRAM}).common
    assert common.bootstrap == "127.0.0.1:9093"
    assert dict(common.kafka) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "reader",
        "sasl.password": 's3"cret',
        "ssl.ca.location": "/etc/kafka/ca.pem",
    }
    assert "s3" not in repr(common)  # the settings hold a password: never shown
    # librdkafka's own names pass as they are
    plain = {**BASE, "tier": "log", "bootstrap": "b:9092", "kafka.sasl.username": "u"}
    assert dict(ReadOptions.parse(plain).common.kafka) == {
        "sasl.username": "u",
    }


def test_kafka_options_without_a_librdkafka_equivalent_are_refused_without_their_value() -> None:
    jks = {**BASE, "tier": "log", "kafka.ssl.truststore.location": "/etc/kafka/trust.jks"}
    with pytest.raises(OptionError, match=r"kafka\.\* options: .*PEM.*ssl\.ca\.location"):
        ReadOptions.parse(jks)
    kerberos = {
        **BASE,
        "kafka.sasl.jaas.config": 'com.sun.security.auth.module.Krb5LoginModule required keyTab="/k";',
    }
    with pytest.raises(OptionError, match=r"sasl\.username and sasl\.password") as refused:
        ReadOptions.parse(kerberos)
    assert "/k" not in str(refused.value)


def test_a_write_names_where_its_kafka_settings_come_from() -> None:
    with pytest.raises(OptionError, match="DTS_KAFKA_CONFIG"):
        WriteOptions.parse({**BASE, "kafka.sasl.password": "p"})


def test_the_options_reference_lists_every_option_and_no_other() -> None:
    """docs/spark-options.md is the reference of the options (strings, no docstring):
    every key the source and sink accept is in its table, and every option its table
    names is accepted, so neither drifts."""
    from pathlib import Path

    from bridge.spark.options import keys

    doc = Path(__file__).resolve().parents[3] / "docs" / "spark-options.md"
    first_cells = [
        line.split("|")[1] for line in doc.read_text().splitlines() if line.startswith("| `")
    ]
    named = {w for cell in first_cells for w in re.findall(r"`([\w.\-<>]+)`", cell)}
    internal = {"path", "table", "scan.merge-only", "scan.tasks"}  # load()'s name; dts.table's own
    accepted = {*keys.READ, *keys.WRITE} - internal
    assert accepted - named == set(), (
        f"accepted but not in docs/spark-options.md: {accepted - named}"
    )
    patterns = {"kafka.<property>", "table.<opt>"}
    named = {n for n in named if not n.startswith("spark.")}  # a session conf beside its option
    unknown = named - {*keys.READ, *keys.WRITE} - patterns
    assert unknown == set(), f"in docs/spark-options.md but not accepted: {unknown}"
