"""LogSpec: everything the LogStore needs to know about one table's log."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

import pyarrow as pa

from logstore.errors import LogSpecError

__all__ = ["LogSpec"]  # the public API (docs/reference)

Consistency = Literal["transactional", "eventual"]
ChangelogMode = Literal["all", "upsert", "auto"]
CONSISTENCIES: tuple[Consistency, ...] = get_args(Consistency)
CHANGELOG_MODES: tuple[ChangelogMode, ...] = get_args(ChangelogMode)
# How a record without an embedded schema carries a DECIMAL (Debezium's
# decimal.handling.mode): `string` and `double` as JSON text or numbers (dts's own logs
# write strings); `precise` (Debezium's default) as base64 of the unscaled two's-complement
# bytes, at the column's declared scale. A record with a schema says for itself.
DecimalMode = Literal["string", "precise", "double"]
DECIMAL_MODES: tuple[DecimalMode, ...] = get_args(DecimalMode)
#: Debezium's placeholder for a value not sent: "refuse" (a bad record) or "keep-current"
#: (passed on; the worker fills in the key's current value)
UnavailableValues = Literal["refuse", "keep-current"]


def decimal_mode(value: str) -> DecimalMode:
    """``value`` as a decimal mode (from a command line or a setting)."""
    for mode in DECIMAL_MODES:
        if value == mode:
            return mode
    raise LogSpecError(f"decimal mode must be one of {DECIMAL_MODES}, got {value!r}")


#: Columns the LogStore adds to the rows it reads; a table may not use these names.
ROW_KIND = "_row_kind"
PARTITION_COLUMN = "_partition"
OFFSET_COLUMN = "_offset"
BARRIER_COLUMN = "_barrier"
META_COLUMNS = (ROW_KIND, PARTITION_COLUMN, OFFSET_COLUMN, BARRIER_COLUMN)


@dataclass(frozen=True)
class LogSpec:
    """One table's log: topic, row schema, key, partitions and delivery settings.

    ``primary_key`` empty means the table has none; its Kafka key is then the whole row.
    ``changelog_mode="auto"`` resolves to ``upsert`` with a primary key, ``all`` without.
    ``replication_factor`` and ``min_insync_replicas`` are used when the topic is created
    (table options ``log.replication-factor`` and ``log.min-insync-replicas``, by default
    the cluster's own ``default.replication.factor`` and ``min.insync.replicas``; see
    ``topic_settings``).

    Attributes:
        topic: the Kafka topic.
        schema: the table's columns (Arrow), without the LogStore's own columns.
        primary_key: the key's columns (empty: no primary key).
        buckets: partitions of the topic, one per FileStore bucket.
        consistency: ``transactional`` (readers see whole barriers, read_committed) or
            ``eventual`` (idempotent writes, no transactions).
        changelog_mode: ``upsert``, ``all`` or ``auto`` (by the key, as above).
        retention_ms: the topic's retention (None: the cluster's default).
        replication_factor: replicas of each partition when the topic is created.
        min_insync_replicas: replicas that must have a write before it is acknowledged.
        decimal_mode: how records without a schema carry decimals: ``string``,
            ``precise`` (Debezium's base64 bytes) or ``double``.
        unavailable_values: Debezium's placeholder for an unsent value: ``refuse`` (a
            dead letter) or ``keep-current`` (the worker keeps the key's value).

    Raises:
        LogSpecError: a setting out of range, naming it and the accepted values.

    Example:
        >>> import pyarrow as pa
        >>> from logstore.spec import LogSpec
        >>> schema = pa.schema([pa.field("id", pa.int64(), nullable=False),
        ...                     pa.field("name", pa.string())])
        >>> LogSpec("db.customers", schema, primary_key=["id"], buckets=4).dlq_topic
        'db.customers.dlq'
    """

    topic: str
    schema: pa.Schema
    primary_key: list[str] = field(default_factory=list)
    buckets: int = 1
    consistency: Consistency = "transactional"
    changelog_mode: ChangelogMode = "auto"
    retention_ms: int | None = None
    replication_factor: int | None = None
    min_insync_replicas: int | None = None
    decimal_mode: DecimalMode = "string"
    unavailable_values: UnavailableValues = "refuse"

    def __post_init__(self) -> None:
        if not self.topic:
            raise LogSpecError("a log needs a topic name")
        if self.buckets < 1:
            raise LogSpecError(f"{self.topic}: buckets must be >= 1, got {self.buckets}")
        rf = self.replication_factor
        if rf is not None and rf < 1:
            raise LogSpecError(f"{self.topic}: log.replication-factor must be >= 1, got {rf}")
        if self.min_insync_replicas is not None and not (
            1 <= self.min_insync_replicas <= (rf if rf is not None else self.min_insync_replicas)
        ):
            raise LogSpecError(
                f"{self.topic}: log.min-insync-replicas must be between 1 and "
                f"log.replication-factor ({self.replication_factor}), got {self.min_insync_replicas}"
            )
        if self.decimal_mode not in DECIMAL_MODES:
            raise LogSpecError(
                f"{self.topic}: decimal mode must be one of {DECIMAL_MODES}, "
                f"got {self.decimal_mode!r}"
            )
        if self.unavailable_values not in get_args(UnavailableValues):
            raise LogSpecError(
                f"{self.topic}: log.unavailable-values must be refuse or keep-current, "
                f"got {self.unavailable_values!r}"
            )
        if self.consistency not in CONSISTENCIES:
            raise LogSpecError(
                f"{self.topic}: log.consistency must be one of {CONSISTENCIES}, got {self.consistency!r}"
            )
        if self.changelog_mode not in CHANGELOG_MODES:
            raise LogSpecError(
                f"{self.topic}: log.changelog-mode must be one of {CHANGELOG_MODES}, "
                f"got {self.changelog_mode!r}"
            )
        missing = [k for k in self.primary_key if k not in self.schema.names]
        if missing:
            raise LogSpecError(f"{self.topic}: primary key columns {missing} are not in the schema")
        clash = [c for c in META_COLUMNS if c in self.schema.names]
        if clash:
            raise LogSpecError(f"{self.topic}: column names {clash} are reserved by the LogStore")
        if self.consistency == "eventual" and not self.primary_key:
            raise LogSpecError(
                f"{self.topic}: log.consistency=eventual needs a primary key (readers could "
                "see duplicates of keyless rows); use transactional"
            )
        if self.changelog_mode == "upsert" and not self.primary_key:
            raise LogSpecError(f"{self.topic}: log.changelog-mode=upsert needs a primary key")

    @property
    def key_columns(self) -> list[str]:
        """Columns of the Kafka key (and of the bucket hash): the primary key or the whole row."""
        return list(self.primary_key) if self.primary_key else list(self.schema.names)

    @property
    def effective_changelog_mode(self) -> str:
        if self.changelog_mode == "auto":
            return "upsert" if self.primary_key else "all"
        return self.changelog_mode

    @property
    def dlq_topic(self) -> str:
        return f"{self.topic}.dlq"

    @property
    def transactional(self) -> bool:
        return self.consistency == "transactional"


def topic_settings(options: Mapping[str, str]) -> dict[str, int | None]:
    """``LogSpec`` topic keywords from table options (``LogSpec(..., **topic_settings(opts))``).

    ``log.replication-factor`` and ``log.min-insync-replicas``, each None when unset: the
    topic then gets the cluster's ``default.replication.factor`` and ``min.insync.replicas``
    (a fixed 1 failed every write on a cluster whose brokers require 2 in-sync replicas).
    """

    def parse(key: str) -> int | None:
        raw = options.get(key)
        if raw is None or str(raw).strip() == "":
            return None
        try:
            return int(str(raw).strip())
        except ValueError:
            raise LogSpecError(f"table option {key} must be an integer, got {raw!r}") from None

    rf = parse("log.replication-factor")
    return {
        "replication_factor": rf,
        "min_insync_replicas": parse("log.min-insync-replicas"),
    }
