"""Table options: the string map stored in the schema, and its typed, resolved view."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar, get_args

from filestore.errors import InvalidOption

MergeEngine = Literal["deduplicate", "partial-update", "aggregation", "first-row"]
MERGE_ENGINES: tuple[MergeEngine, ...] = get_args(MergeEngine)
# auto (default): every APPEND commit stores its exact changelog. A writer whose input is
# already a full changelog (TableWrite(input_changelog=True)) stores it as written; any other
# commit on a primary-key table looks up the old values of the keys it writes (commit_lookup).
# An append-only table's new data files are their own (+I) changelog.
ChangelogProducer = Literal["auto", "none", "input", "lookup"]
CHANGELOG_PRODUCERS: tuple[ChangelogProducer, ...] = get_args(ChangelogProducer)
AGGREGATE_FUNCTIONS = (
    "sum",
    "min",
    "max",
    "last_value",
    "last_non_null_value",
    "first_value",
    "first_non_null_value",
)
# aggregate functions that can take back a value (Paimon: FieldAggregator.retract)
RETRACTABLE_FUNCTIONS = ("sum",)
FILE_FORMATS = ("parquet",)
# a value a Debezium source did not send (its placeholder, e.g. PostgreSQL's unchanged
# TOASTed column under REPLICA IDENTITY DEFAULT): refuse the record (a bad record), or keep
# the column's current value (a partial update, from the worker's per-bucket state)
UnavailableValues = Literal["refuse", "keep-current"]
UNAVAILABLE_VALUES: tuple[UnavailableValues, ...] = get_args(UnavailableValues)
IcebergStorage = Literal["disabled", "table-location"]
LogConsistency = Literal["transactional", "eventual"]
LogChangelogMode = Literal["all", "upsert", "auto"]

_SIZE_UNITS = {"": 1, "b": 1, "kb": 1 << 10, "k": 1 << 10, "mb": 1 << 20, "m": 1 << 20}
_SIZE_UNITS |= {"gb": 1 << 30, "g": 1 << 30}
_DURATION_UNITS = {"ms": 1, "s": 1000, "min": 60_000, "m": 60_000, "h": 3_600_000}
_DURATION_UNITS |= {"d": 86_400_000, "": 1}


# every table option a table may store: the FileStore's, and the log tier's, which
# the LogStore and the worker read from the same schema
KNOWN_OPTIONS = frozenset(
    {
        "bucket",
        "bucket-key",
        "merge-engine",
        "write-buffer-size",
        "file.format",
        "file.compression",
        "target-file-size",
        "manifest.merge-min-count",
        "commit.max-retries",
        "num-sorted-run.compaction-trigger",
        "num-sorted-run.stop-trigger",
        "auto-compaction",
        "compaction.max-size-amplification-percent",
        "compaction.size-ratio",
        "compaction.delete-ratio-threshold",
        "snapshot.num-retained.min",
        "snapshot.num-retained.max",
        "snapshot.time-retained",
        "consumer.expiration-time",
        "changelog-producer",
        "change-tracking",
        "deletion-vectors.enabled",
        "metadata.iceberg.storage",
        "lookup.cache-max-memory-size",
        "aggregation.remove-record-on-delete",
        "barrier.interval",
        "log.topic",
        "log.consistency",
        "log.changelog-mode",
        "log.retention",
        "log.replication-factor",
        "log.min-insync-replicas",
        "log.unavailable-values",
    }
)
_FIELD_OPTION = re.compile(r"fields\.[^.]+\.(aggregate-function|ignore-retract)")


def check_known(options: Mapping[str, str]) -> None:
    """Refuse option keys no part of the system reads, with the closest known key.

    Checked when a table is created (stored schemas are read as they are): a
    misspelt option would otherwise be stored and silently ignored.
    """
    for key in options:
        if key in KNOWN_OPTIONS or _FIELD_OPTION.fullmatch(key):
            continue
        close = difflib.get_close_matches(key, sorted(KNOWN_OPTIONS), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InvalidOption(
            f"unknown table option {key!r}{hint} (known: {', '.join(sorted(KNOWN_OPTIONS))}, "
            "fields.<column>.aggregate-function, fields.<column>.ignore-retract)"
        )


def parse_size(text: str, key: str = "size") -> int:
    """'64 mb' -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise InvalidOption(f"option {key!r}: {text!r} is not a size like '64 mb'")
    return int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]


def parse_duration_ms(text: str, key: str = "duration") -> int:
    """'1 s' -> 1000 (milliseconds)."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _DURATION_UNITS:
        raise InvalidOption(f"option {key!r}: {text!r} is not a duration like '1 s' or '7 d'")
    return int(m.group(1)) * _DURATION_UNITS[m.group(2).lower()]


def _int(options: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidOption(f"option {key!r}: {raw!r} is not an integer") from None
    if value < minimum:
        raise InvalidOption(f"option {key!r}: {value} is below the minimum {minimum}")
    return value


#: ``compaction.delete-ratio-threshold`` unless set: Paimon's 0.2; with Iceberg metadata
#: 0.05, since DuckDB checks every row of a file that has any position delete (an
#: aggregate at 0.65x pyiceberg's copy-on-write table with 0.2, 1.34x with 0.05, for 16%
#: more write time: bench/README.md, "Iceberg metadata")
DELETE_RATIO_DEFAULT = 0.2
DELETE_RATIO_ICEBERG = 0.05


def _ratio(options: Mapping[str, str], key: str, default: float) -> float:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidOption(f"option {key!r}: {raw!r} is not a number") from None
    if not 0.0 < value <= 1.0:
        raise InvalidOption(f"option {key!r}: {value} is not a share in (0, 1]")
    return value


_Word = TypeVar("_Word", bound=str)


def _choice(
    options: Mapping[str, str], key: str, default: _Word, choices: tuple[_Word, ...]
) -> _Word:
    """The option's value as one of ``choices`` (a ``Literal``'s words)."""
    value = options.get(key, default)
    for choice in choices:
        if value == choice:
            return choice
    raise InvalidOption(f"option {key!r}: {value!r} is not one of {', '.join(choices)}")


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false"):
        raise InvalidOption(f"option {key!r}: {raw!r} is not true or false")
    return raw.lower() == "true"


def _file_format(options: Mapping[str, str]) -> str:
    value = options.get("file.format", "parquet")
    if value == "orc":
        raise InvalidOption(
            "option 'file.format': 'orc' is not supported (data files are written as Parquet "
            f"only); supported: {', '.join(FILE_FORMATS)}"
        )
    return _choice(options, "file.format", "parquet", FILE_FORMATS)


def _stop_trigger(options: Mapping[str, str]) -> int:
    """num-sorted-run.stop-trigger: default compaction trigger + 3, never below the trigger."""
    trigger = _int(options, "num-sorted-run.compaction-trigger", 5, 1)
    stop = _int(options, "num-sorted-run.stop-trigger", trigger + 3, 1)
    if stop < trigger:
        raise InvalidOption(
            f"option 'num-sorted-run.stop-trigger': {stop} is below "
            f"num-sorted-run.compaction-trigger {trigger}"
        )
    return stop


@dataclass(frozen=True)
class CoreOptions:
    """Resolved table options (defaults applied, values validated).

    Tables store options as strings (``TableSchema.options``); this is their typed view,
    built by ``from_map`` (``Table.options`` gives a table's). Sizes accept ``64 mb``,
    ``1 gb``, ...; durations ``500 ms``, ``1 s``, ``1 h``, ``7 d``.

    Attributes:
        raw: the options as stored, including ``fields.<column>.*`` and log options.
        num_buckets: ``bucket`` (default 1): buckets per partition.
        bucket_key: ``bucket-key`` (comma-separated; default: the primary key, else
            every column): the columns hashed to pick a row's bucket.
        merge_engine: ``merge-engine``: how rows of one key combine: ``deduplicate``
            (default, last wins), ``partial-update``, ``aggregation`` or ``first-row``.
        write_buffer_size: ``write-buffer-size`` (default 256 mb), in bytes: a writer
            flushes its buffered rows as files when they reach it.
        file_format: ``file.format``: ``parquet`` (the only one).
        file_compression: ``file.compression`` (default ``zstd``): the Parquet codec.
        target_file_size: ``target-file-size`` (default 128 mb), in bytes, for
            compaction output.
        manifest_merge_min_count: ``manifest.merge-min-count`` (default 30): delta
            manifests that trigger merging them into the base.
        commit_max_retries: ``commit.max-retries`` (default 20): attempts against
            concurrent commits before CommitConflict.
        num_sorted_run_compaction_trigger: ``num-sorted-run.compaction-trigger``
            (default 5): sorted runs in a bucket that trigger auto-compaction.
        num_sorted_run_stop_trigger: ``num-sorted-run.stop-trigger`` (default the
            trigger + 3): sorted runs at which writes stall until compacted.
        auto_compaction: ``auto-compaction`` (default true): compact after commits.
        compaction_max_size_amplification_percent:
            ``compaction.max-size-amplification-percent`` (default 200): extra size of
            newer runs over the oldest that makes a compaction rewrite them all.
        compaction_size_ratio: ``compaction.size-ratio`` (default 1), in percent: the
            slack when picking runs of similar size to merge.
        compaction_delete_ratio: ``compaction.delete-ratio-threshold`` (default 0.2,
            Paimon's; 0.05 with Iceberg metadata): with deletion vectors, an upper-level
            file whose vector deletes this share of its rows is rewritten alone without
            them, so readers (Iceberg's included) are not left to skip ever more deleted
            positions.
        snapshot_num_retained_min: ``snapshot.num-retained.min`` (default 10).
        snapshot_num_retained_max: ``snapshot.num-retained.max`` (default unbounded).
        snapshot_time_retained_ms: ``snapshot.time-retained`` (default 1 h), in ms:
            older snapshots expire, within the two bounds above.
        consumer_expiration_ms: ``consumer.expiration-time`` (default 1 d), in ms: how
            long a streaming reader's recorded position (``consumer-id``) holds back
            expiration after its last update.
        changelog_producer: ``changelog-producer``: ``auto`` (default), ``none``,
            ``input`` or ``lookup`` (see ``Table.changes``).
        change_tracking: ``change-tracking`` (default true); false: no log topic.
        deletion_vectors: ``deletion-vectors.enabled`` (default false): commits mark
            superseded rows so reads merge nothing (primary key, ``deduplicate``).
        iceberg_storage: ``metadata.iceberg.storage``: ``disabled`` (default) or
            ``table-location`` (Iceberg metadata written beside the table's own).
        lookup_cache_max_memory: ``lookup.cache-max-memory-size`` (default 128 mb), in
            bytes: decoded data files a table handle keeps for lookups.
        log_consistency: ``log.consistency``: ``transactional`` (default) or ``eventual``.
        log_changelog_mode: ``log.changelog-mode``: ``auto`` (default: ``upsert`` with
            a primary key), ``upsert`` or ``all`` (keeps -U/+U pairs in the log).
        barrier_interval_ms: ``barrier.interval`` (default 1 s), in ms, between the log
            writer's barriers.
        log_retention_ms: ``log.retention`` (default 7 d), in ms: the topic's retention.
        aggregation_remove_record_on_delete: ``aggregation.remove-record-on-delete``
            (default false): a -D removes the whole key instead of retracting values.
        log_unavailable_values: ``log.unavailable-values``: ``refuse`` (default) a
            source value marked unavailable, or ``keep-current`` the column's value.

    Example:
        >>> options = CoreOptions.from_map({"bucket": "4", "snapshot.time-retained": "2 h"})
        >>> options.num_buckets, options.snapshot_time_retained_ms
        (4, 7200000)
    """

    raw: dict[str, str] = field(default_factory=dict)
    num_buckets: int = 1  # option ``bucket``
    bucket_key: tuple[str, ...] = ()
    merge_engine: MergeEngine = "deduplicate"
    write_buffer_size: int = 256 << 20
    file_format: str = "parquet"
    file_compression: str = "zstd"
    target_file_size: int = 128 << 20
    manifest_merge_min_count: int = 30
    commit_max_retries: int = 20
    num_sorted_run_compaction_trigger: int = 5
    num_sorted_run_stop_trigger: int = 8
    # lifecycle (issue 3): compaction, expiration, changelog
    auto_compaction: bool = True
    compaction_max_size_amplification_percent: int = 200
    compaction_size_ratio: int = 1
    compaction_delete_ratio: float = 0.2
    snapshot_num_retained_min: int = 10
    snapshot_num_retained_max: int = 2**31 - 1
    snapshot_time_retained_ms: int = 3_600_000
    consumer_expiration_ms: int = 86_400_000
    changelog_producer: ChangelogProducer = "auto"
    change_tracking: bool = True
    # merge-on-write: commits mark superseded rows, reads merge nothing (deletion_vectors.py)
    deletion_vectors: bool = False
    # Iceberg metadata beside the table's own (filestore.iceberg): disabled, table-location
    iceberg_storage: IcebergStorage = "disabled"
    # decoded data files a table handle keeps for its commits' lookups (file_cache.py)
    lookup_cache_max_memory: int = 128 << 20
    log_consistency: LogConsistency = "transactional"
    log_changelog_mode: LogChangelogMode = "auto"
    barrier_interval_ms: int = 1000
    log_retention_ms: int = 7 * 86_400_000
    # aggregation engine: a -D removes the whole key instead of retracting its values
    aggregation_remove_record_on_delete: bool = False
    log_unavailable_values: UnavailableValues = "refuse"

    @classmethod
    def from_map(cls, options: Mapping[str, str]) -> CoreOptions:
        """Resolve stored options (keys are not checked against the known ones here).

        Args:
            options: option keys and string values, as a table stores them.

        Returns:
            The options with defaults applied.

        Raises:
            InvalidOption: a value cannot be parsed or is out of range.
        """
        raw = {str(k): str(v) for k, v in options.items()}
        bucket_key = tuple(c.strip() for c in raw.get("bucket-key", "").split(",") if c.strip())
        # the delete ratio's default depends on it
        iceberg = _choice(raw, "metadata.iceberg.storage", "disabled", get_args(IcebergStorage))
        resolved = cls(
            raw=raw,
            num_buckets=_int(raw, "bucket", 1, 1),
            bucket_key=bucket_key,
            merge_engine=_choice(raw, "merge-engine", "deduplicate", MERGE_ENGINES),
            write_buffer_size=parse_size(
                raw.get("write-buffer-size", "256 mb"), "write-buffer-size"
            ),
            file_format=_file_format(raw),
            file_compression=raw.get("file.compression", "zstd"),
            target_file_size=parse_size(raw.get("target-file-size", "128 mb"), "target-file-size"),
            manifest_merge_min_count=_int(raw, "manifest.merge-min-count", 30, 2),
            commit_max_retries=_int(raw, "commit.max-retries", 20, 0),
            num_sorted_run_compaction_trigger=_int(raw, "num-sorted-run.compaction-trigger", 5, 1),
            num_sorted_run_stop_trigger=_stop_trigger(raw),
            auto_compaction=_bool(raw, "auto-compaction", True),
            compaction_max_size_amplification_percent=_int(
                raw, "compaction.max-size-amplification-percent", 200, 0
            ),
            compaction_size_ratio=_int(raw, "compaction.size-ratio", 1, 0),
            compaction_delete_ratio=_ratio(
                raw,
                "compaction.delete-ratio-threshold",
                DELETE_RATIO_ICEBERG if iceberg == "table-location" else DELETE_RATIO_DEFAULT,
            ),
            snapshot_num_retained_min=_int(raw, "snapshot.num-retained.min", 10, 1),
            snapshot_num_retained_max=_int(raw, "snapshot.num-retained.max", 2**31 - 1, 1),
            snapshot_time_retained_ms=parse_duration_ms(
                raw.get("snapshot.time-retained", "1 h"), "snapshot.time-retained"
            ),
            consumer_expiration_ms=parse_duration_ms(
                raw.get("consumer.expiration-time", "1 d"), "consumer.expiration-time"
            ),
            changelog_producer=_choice(raw, "changelog-producer", "auto", CHANGELOG_PRODUCERS),
            change_tracking=_bool(raw, "change-tracking", True),
            deletion_vectors=_bool(raw, "deletion-vectors.enabled", False),
            iceberg_storage=iceberg,
            lookup_cache_max_memory=parse_size(
                raw.get("lookup.cache-max-memory-size", "128 mb"), "lookup.cache-max-memory-size"
            ),
            log_consistency=_choice(
                raw, "log.consistency", "transactional", get_args(LogConsistency)
            ),
            log_changelog_mode=_choice(
                raw, "log.changelog-mode", "auto", get_args(LogChangelogMode)
            ),
            barrier_interval_ms=parse_duration_ms(
                raw.get("barrier.interval", "1 s"), "barrier.interval"
            ),
            log_retention_ms=parse_duration_ms(raw.get("log.retention", "7 d"), "log.retention"),
            aggregation_remove_record_on_delete=_bool(
                raw, "aggregation.remove-record-on-delete", False
            ),
            log_unavailable_values=_choice(
                raw, "log.unavailable-values", "refuse", UNAVAILABLE_VALUES
            ),
        )
        for key, value in raw.items():
            is_agg = key.startswith("fields.") and key.endswith(".aggregate-function")
            if is_agg and value not in AGGREGATE_FUNCTIONS:
                raise InvalidOption(
                    f"option {key!r}: {value!r} is not one of {', '.join(AGGREGATE_FUNCTIONS)}"
                )
            if key.startswith("fields.") and key.endswith(".ignore-retract"):
                _bool(raw, key, False)
        return resolved

    def aggregate_function(self, column: str) -> str:
        """Aggregate function of a value column (aggregation merge engine).

        Args:
            column: the value column's name.

        Returns:
            ``fields.<column>.aggregate-function``, default ``last_non_null_value``.
        """
        return self.raw.get(f"fields.{column}.aggregate-function", "last_non_null_value")

    def ignore_retract(self, column: str) -> bool:
        """``fields.<col>.ignore-retract``: -U/-D rows leave this column's aggregate alone.

        Args:
            column: the value column's name.

        Returns:
            Whether the option is set to true (default false).
        """
        return _bool(self.raw, f"fields.{column}.ignore-retract", False)

    def unretractable_columns(
        self, columns: Sequence[str], *, configured_only: bool = False
    ) -> list[str]:
        """Columns whose aggregate function cannot take back a -U/-D row (and that do
        not set ``fields.<col>.ignore-retract``). ``configured_only``: only columns with an
        explicit ``fields.<col>.aggregate-function``.

        Args:
            columns: the value columns to check.
            configured_only: only report columns with an explicit function.

        Returns:
            Those of ``columns`` that cannot retract, in their order.
        """
        return [
            c
            for c in columns
            if self.aggregate_function(c) not in RETRACTABLE_FUNCTIONS
            and not self.ignore_retract(c)
            and (not configured_only or f"fields.{c}.aggregate-function" in self.raw)
        ]

    def log_topic(self, full_name: str) -> str:
        """The table's Kafka topic.

        Args:
            full_name: the table's ``'db.table'`` name.

        Returns:
            ``log.topic``, default ``dts.<db>.<table>``.
        """
        return self.raw.get("log.topic", f"dts.{full_name}")
