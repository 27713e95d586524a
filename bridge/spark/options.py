"""Options of the `dts` data source and sink, parsed once into typed dataclasses.

Spark hands options as a case-insensitive string map; every key is looked up
lower-cased here so `maxRowsPerTrigger` and `maxrowspertrigger` are the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bridge.spark.errors import OptionError

TIERS = ("file", "log", "hybrid")
SCAN_MODES = ("latest-full", "latest", "from-snapshot", "from-barrier", "from-timestamp")
ROW_KIND = "_row_kind"
BARRIER = "_barrier"
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
        )


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
    columns: list[str] = field(default_factory=list)
    metadata_columns: bool = False
    poll_timeout_s: float = 2.0

    @staticmethod
    def parse(options: Mapping[str, str]) -> ReadOptions:
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
        mode = low.get("scan.mode", "latest-full")
        if mode not in SCAN_MODES:
            raise OptionError(
                f"option 'scan.mode' must be one of {', '.join(SCAN_MODES)}, got {mode!r}"
            )
        opts = ReadOptions(
            common=common,
            snapshot_id=_int(low, "snapshot-id"),
            barrier=_int(low, "barrier"),
            timestamp=_int(low, "timestamp"),
            tag=low.get("tag"),
            changes=changes,
            tier=tier,
            scan_mode=mode,
            scan_snapshot_id=_int(low, "scan.snapshot-id"),
            scan_barrier=_int(low, "scan.barrier"),
            scan_timestamp=_int(low, "scan.timestamp-millis"),
            max_rows_per_trigger=_int(low, "maxRowsPerTrigger"),
            max_barriers_per_trigger=_int(low, "maxBarriersPerTrigger"),
            columns=_csv(low, "columns"),
            metadata_columns=_bool(low, "metadata-columns"),
            poll_timeout_s=float(low.get("log.poll-timeout", "2.0")),
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
        return self.metadata_columns or self.tier is not None or self.changes is not None


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

    @staticmethod
    def parse(options: Mapping[str, str]) -> WriteOptions:
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
            partition_by=_csv(low, "partition-by"),
            table_options=table_options,
            target_tier=tier,
            commit_user=low.get("commit-user"),
            checkpoint=low.get("checkpointlocation"),
            barrier=_int(low, "barrier"),
            meta_sources=_csv(low, "meta.sources"),
            meta_heartbeat_timeout_ms=_int(low, "meta.heartbeat-timeout-ms") or 600_000,
        )
