"""Options of the `dts` data source and sink, parsed once into typed dataclasses.

Spark hands options as a case-insensitive string map; every key is looked up
lower-cased here so `maxRowsPerTrigger` and `maxrowspertrigger` are the same.

The room also holds what options name: `keys` (the accepted keys), `habits` (Delta's
and Kafka's spellings), `catalog` (opening the table, time travel) and `schema`
(the table's schema as Spark sees it).

Imports within bridge.spark: errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bridge.spark.errors import OptionError
from bridge.spark.options.habits import ChangeFeed, change_feed, parse_time_ms, starting_offsets
from bridge.spark.options.keys import KAFKA_PREFIX, check_keys
from filestore.errors import InvalidIdentifier
from filestore.format.identifiers import check_identifier
from filestore.format.row_kind import ROW_KIND_COLUMN
from logstore.client_config import from_java_properties
from logstore.errors import ClientConfigError
from logstore.spec import BARRIER_COLUMN

TIERS = ("file", "log", "hybrid")
SCAN_MODES = ("latest-full", "latest", "from-snapshot", "from-barrier", "from-timestamp")
# Spark rows carry the stores' own metadata columns under their own names
ROW_KIND = ROW_KIND_COLUMN
BARRIER = BARRIER_COLUMN
METADATA_COLUMNS = (ROW_KIND, BARRIER)


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _int(opts: dict[str, str], key: str) -> int | None:
    raw = opts.get(key.lower())
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise OptionError(f"option {key!r} must be an integer, got {raw!r}") from None


def _bool(opts: dict[str, str], key: str, default: bool = False) -> bool:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise OptionError(f"option {key!r} must be true or false, got {raw!r}")


def _csv(opts: dict[str, str], key: str) -> list[str]:
    raw = opts.get(key.lower(), "")
    return [p.strip() for p in raw.split(",") if p.strip()]


def table_name(opts: Mapping[str, str]) -> str:
    """The `db.table` name from `load("db.table")`/`save(...)` (Spark's `path`) or `table`."""
    low = _lower(opts)
    name = low.get("table") or low.get("path")
    if not name:
        raise OptionError('no table given: use .load("db.table") / .save("db.table")')
    if "." not in name:
        name = f"default.{name}"
    return name


@dataclass(frozen=True)
class CommonOptions:
    warehouse: str
    table: str
    bootstrap: str | None = None
    meta_url: str | None = None
    #: the CA file an https MetaService is verified with (None: env DTS_META_CA_FILE)
    meta_ca_file: str | None = None
    #: the MetaService's bearer token (None: env DTS_META_TOKEN); not shown, a secret
    meta_token: str | None = field(default=None, repr=False)
    #: librdkafka settings from the `kafka.*` options, over DTS_KAFKA_CONFIG's (not shown:
    #: they may hold a password)
    kafka: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @staticmethod
    def parse(options: Mapping[str, str]) -> CommonOptions:
        low = _lower(options)
        warehouse = low.get("warehouse")
        if not warehouse:
            raise OptionError('option "warehouse" is required (the FileStore root directory)')
        return CommonOptions(
            warehouse=warehouse,
            table=table_name(options),
            bootstrap=low.get("bootstrap") or low.get("kafka.bootstrap.servers"),
            meta_url=low.get("meta.url"),
            meta_ca_file=low.get("meta.ca-file") or None,
            meta_token=low.get("meta.token") or None,
            kafka=kafka_settings(low),
        )


def kafka_settings(low: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The `kafka.*` options as librdkafka settings: Spark's Kafka source's Java names (a
    JAAS line, a PEM truststore) or librdkafka's own, so one set of options serves both."""
    given = {
        k.removeprefix(KAFKA_PREFIX): v
        for k, v in low.items()
        if k.startswith(KAFKA_PREFIX) and k != "kafka.bootstrap.servers"
    }
    try:
        return tuple(sorted(from_java_properties(given).items()))
    except ClientConfigError as e:
        raise OptionError(f"kafka.* options: {e}") from e


@dataclass(frozen=True)
class ReadOptions:
    """Options of a batch or streaming read."""

    common: CommonOptions
    snapshot_id: int | None = None
    barrier: int | None = None
    timestamp: int | None = None
    tag: str | None = None
    changes: tuple[int, int] | None = None
    tier: str | None = None
    scan_mode: str = "latest-full"
    scan_snapshot_id: int | None = None
    scan_barrier: int | None = None
    scan_timestamp: int | None = None
    max_rows_per_trigger: int | None = None
    max_barriers_per_trigger: int | None = None
    # a file-tier stream's position, recorded so expiration keeps what it has to read
    consumer_id: str | None = None
    columns: list[str] = field(default_factory=list)
    metadata_columns: bool = False
    poll_timeout_s: float = 2.0
    # an upsert-mode log read as a full changelog (-U/+U, full -D), see bridge.spark.read.log_state
    log_normalize: bool = True
    feed: ChangeFeed | None = None  # Delta readChangeFeed (adds _change_type)
    start_offsets: str | dict[int, int] | None = None  # Kafka startingOffsets (log tier)
    max_offsets_per_trigger: int | None = None  # record-level admission (log tier)
    merge_only: bool = False  # only splits that need a merge (the rest Spark reads natively)
    merge_tasks: int | None = None  # the merge part's tasks come in multiples of this
    native: bool = True  # false: never re-planned as Spark's own scans by the extension

    @staticmethod
    def parse(options: Mapping[str, str]) -> ReadOptions:
        check_keys(options.keys(), "read")
        low = _lower(options)
        common = CommonOptions.parse(options)
        changes = None
        if low.get("changes"):
            parts = low["changes"].split(",")
            if len(parts) != 2:
                raise OptionError(
                    f'option "changes" must be "start,end" snapshot ids, got {low["changes"]!r}'
                )
            try:
                changes = (int(parts[0]), int(parts[1]))
            except ValueError:
                raise OptionError(
                    f'option "changes" must be two integers, got {low["changes"]!r}'
                ) from None
        tier = low.get("tier")
        if tier is not None and tier not in TIERS:
            raise OptionError(f"option 'tier' must be one of {', '.join(TIERS)}, got {tier!r}")
        feed = change_feed(low)
        mode = low.get("scan.mode") or _feed_scan_mode(feed) or "latest-full"
        if mode not in SCAN_MODES:
            raise OptionError(
                f"option 'scan.mode' must be one of {', '.join(SCAN_MODES)}, got {mode!r}"
            )
        version = _int(low, "versionAsOf")
        snapshot_id = _int(low, "snapshot-id")
        if version is not None and snapshot_id is not None:
            raise OptionError("give one of snapshot-id, versionAsOf (they are the same)")
        stamp = _int(low, "timestamp")
        if low.get("timestampasof"):
            if stamp is not None:
                raise OptionError("give one of timestamp, timestampAsOf (they are the same)")
            stamp = parse_time_ms("timestampAsOf", low["timestampasof"])
        start_offsets = starting_offsets(low.get("startingoffsets"))
        max_offsets = _int(low, "maxOffsetsPerTrigger")
        log_only = [
            k
            for k, v in (("startingOffsets", start_offsets), ("maxOffsetsPerTrigger", max_offsets))
            if v is not None
        ]
        if log_only and tier not in ("log", "hybrid"):
            raise OptionError(
                f"options {log_only} apply to streaming reads of the log "
                "(.option('tier', 'log')); on the FileStore tier use scan.mode / maxRowsPerTrigger"
            )
        if start_offsets is not None and tier != "log":
            raise OptionError(
                "option 'startingOffsets' applies to tier=log (hybrid starts at its snapshot)"
            )
        if tier in ("log", "hybrid") and not common.bootstrap:
            raise OptionError(
                f'tier={tier} reads Kafka: give .option("bootstrap", "host:port") '
                "or the Spark conf spark.dts.bootstrap"
            )
        if feed is not None and changes is not None:
            raise OptionError("give one of changes, readChangeFeed")
        if low.get("consumer-id") and tier in ("log", "hybrid"):
            raise OptionError(
                f"option 'consumer-id' holds back the expiration of the file tier's snapshots "
                f"a stream has still to read; tier={tier} reads Kafka, whose offsets Spark's "
                "checkpoint keeps"
            )
        if low.get("consumer-id"):
            try:  # at the start, not at the first batch: the id names a file in the table
                check_identifier("consumer", low["consumer-id"])
            except InvalidIdentifier as exc:
                raise OptionError(f"option 'consumer-id': {exc}") from None
        opts = ReadOptions(
            common=common,
            snapshot_id=version if version is not None else snapshot_id,
            barrier=_int(low, "barrier"),
            timestamp=stamp,
            tag=low.get("tag"),
            changes=changes,
            tier=tier,
            scan_mode=mode,
            scan_snapshot_id=_int(low, "scan.snapshot-id")
            or (feed.starting_version if feed else None),
            scan_barrier=_int(low, "scan.barrier"),
            scan_timestamp=_int(low, "scan.timestamp-millis")
            or (feed.starting_ms if feed else None),
            max_rows_per_trigger=_int(low, "maxRowsPerTrigger"),
            max_barriers_per_trigger=_int(low, "maxBarriersPerTrigger"),
            consumer_id=low.get("consumer-id") or None,
            columns=_csv(low, "columns"),
            metadata_columns=_bool(low, "metadata-columns"),
            poll_timeout_s=_float(low, "log.poll-timeout", 2.0),
            log_normalize=_bool(low, "log.normalize", True),
            feed=feed,
            start_offsets=start_offsets,
            max_offsets_per_trigger=max_offsets,
            merge_only=_bool(low, "scan.merge-only"),
            merge_tasks=_int(low, "scan.tasks"),
            native=_bool(low, "scan.native", True),
        )
        travel = [
            k
            for k in ("snapshot_id", "barrier", "timestamp", "tag")
            if getattr(opts, k) is not None
        ]
        if len(travel) > 1:
            raise OptionError(
                f"give at most one of snapshot-id, barrier, timestamp, tag (got {travel})"
            )
        needs = {
            "from-snapshot": opts.scan_snapshot_id,
            "from-barrier": opts.scan_barrier,
            "from-timestamp": opts.scan_timestamp,
        }
        if mode in needs and needs[mode] is None:
            key = {
                "from-snapshot": "scan.snapshot-id",
                "from-barrier": "scan.barrier",
                "from-timestamp": "scan.timestamp-millis",
            }[mode]
            raise OptionError(f"scan.mode={mode} needs option {key!r}")
        return opts

    @property
    def wants_metadata(self) -> bool:
        """Whether the output schema carries `_row_kind` and `_barrier`."""
        return (
            self.metadata_columns
            or self.tier is not None
            or self.changes is not None
            or self.feed is not None
        )


def _feed_scan_mode(feed: ChangeFeed | None) -> str | None:
    """Where a change-feed stream starts (Delta's startingVersion / startingTimestamp)."""
    if feed is None:
        return None
    return "from-snapshot" if feed.starting_version is not None else "from-timestamp"


def _float(opts: dict[str, str], key: str, default: float) -> float:
    raw = opts.get(key.lower())
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise OptionError(f"option {key!r} must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option {key!r} must be > 0, got {raw!r}")
    return value


@dataclass(frozen=True)
class WriteOptions:
    """Options of a batch or streaming write (and of `option("create", "true")`)."""

    common: CommonOptions
    create: bool = False
    if_not_exists: bool = False
    replace: bool = False
    primary_key: list[str] = field(default_factory=list)
    partition_by: list[str] = field(default_factory=list)
    table_options: dict[str, str] = field(default_factory=dict)
    target_tier: str = "file"
    commit_user: str | None = None
    checkpoint: str | None = None
    barrier: int | None = None
    meta_sources: list[str] = field(default_factory=list)
    meta_heartbeat_timeout_ms: int = 600_000
    merge_schema: bool = False  # Delta's mergeSchema: new nullable columns are added
    # "update" when the dts extension took a stream's outputMode("update") (it sets
    # OUTPUT_MODE_OPTION); complete mode reaches the sink as `overwrite`
    update_mode: bool = False

    @staticmethod
    def parse(options: Mapping[str, str]) -> WriteOptions:
        check_keys(options.keys(), "write")
        low = _lower(options)
        tier = low.get("target.tier", "file")
        if tier not in ("file", "log"):
            raise OptionError(f"option 'target.tier' must be file or log, got {tier!r}")
        table_options = {
            k.removeprefix("table."): v for k, v in low.items() if k.startswith("table.")
        }
        return WriteOptions(
            common=CommonOptions.parse(options),
            create=_bool(low, "create"),
            if_not_exists=_bool(low, "if-not-exists"),
            replace=_bool(low, "replace"),
            primary_key=_csv(low, "primary-key"),
            partition_by=_partition_by(low),
            table_options=table_options,
            target_tier=tier,
            commit_user=low.get("commit-user"),
            checkpoint=low.get("checkpointlocation"),
            barrier=_int(low, "barrier"),
            meta_sources=_csv(low, "meta.sources"),
            meta_heartbeat_timeout_ms=_int(low, "meta.heartbeat-timeout-ms") or 600_000,
            merge_schema=_bool(low, "mergeSchema"),
            update_mode=low.get(OUTPUT_MODE_OPTION) == "update",
        )


#: set by the extension's UpdateModeRule (jvm/src/io/dts/spark/UpdateAsAppendTable.java)
OUTPUT_MODE_OPTION = "__dts_output_mode"


def _partition_by(low: dict[str, str]) -> list[str]:
    """`partition-by`, or `partitionBy` (a comma list or Spark's JSON list of names)."""
    ours = _csv(low, "partition-by")
    raw = low.get("partitionby", "").strip()
    theirs: list[str] = []
    if raw.startswith("["):
        import json

        try:
            theirs = [str(c) for c in json.loads(raw)]
        except ValueError:
            raise OptionError(f"option 'partitionBy' is not a list of columns: {raw!r}") from None
    elif raw:
        theirs = [p.strip() for p in raw.split(",") if p.strip()]
    if ours and theirs and ours != theirs:
        raise OptionError(f"partition-by {ours} and partitionBy {theirs} disagree")
    return ours or theirs
