"""Strict options: every key checked, misspellings named with a suggestion (no Spark)."""

from __future__ import annotations

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
