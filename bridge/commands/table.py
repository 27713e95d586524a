"""`dts table ...`: create, list, describe, drop, scan and list snapshots of FileStore tables."""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Callable
from typing import Any

import click
import pyarrow as pa
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table as RichTable

from filestore import Catalog, FileStoreError, Table
from filestore.format.options import parse_duration_ms
from filestore.format.types import PRIMITIVE_TYPE_NAMES, type_from_json
from filestore.iceberg import IcebergSync

_TYPE_ALIASES = {
    "int": "int32",
    "long": "int64",
    "bigint": "int64",
    "double": "float64",
    "float": "float32",
    "bool": "boolean",
    "str": "string",
    "date": "date32",
}

_KNOWN_TYPES = ", ".join(
    [*PRIMITIVE_TYPE_NAMES, *_TYPE_ALIASES, "timestamp[s|ms|us|ns]", "decimal(p,s)"]
)


def warehouse_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--warehouse",
        default=lambda: os.environ.get("DTS_WAREHOUSE", "./warehouse"),
        show_default="$DTS_WAREHOUSE or ./warehouse",
        help="Warehouse path or URI (file://, s3://, hdfs://).",
    )(fn)


def parse_schema(text: str) -> pa.Schema:
    """'id:int64 not null, name:string, ts:timestamp[us]' -> pa.Schema."""
    fields = []
    for part in _entries(text, "--schema"):
        if ":" not in part:
            raise click.BadParameter(f"{part!r} is not name:type", param_hint="--schema")
        name, typ = (s.strip() for s in part.split(":", 1))
        nullable = True
        if typ.lower().endswith(" not null"):
            typ, nullable = typ[: -len(" not null")].strip(), False
        typ = _TYPE_ALIASES.get(typ.lower(), typ.lower())
        if not typ.startswith(("timestamp", "decimal")) and typ not in PRIMITIVE_TYPE_NAMES:
            raise click.BadParameter(
                f"column {name!r}: unknown type {typ!r}; use one of {_KNOWN_TYPES}",
                param_hint="--schema",
            )
        try:
            if typ.startswith("timestamp"):
                unit = typ[typ.index("[") + 1 : typ.index("]")] if "[" in typ else "us"
                arrow_type = pa.timestamp(unit)
            elif typ.startswith("decimal"):
                p, s = typ[typ.index("(") + 1 : typ.index(")")].split(",")
                arrow_type = pa.decimal128(int(p), int(s))
            else:
                arrow_type = type_from_json(typ)
        except (FileStoreError, ValueError) as e:
            raise click.BadParameter(
                f"column {name!r}: bad type {typ!r} ({e}); e.g. timestamp[ms], decimal(10,2)",
                param_hint="--schema",
            ) from None
        fields.append(pa.field(name, arrow_type, nullable=nullable))
    if not fields:
        raise click.BadParameter("no columns given", param_hint="--schema")
    return pa.schema(fields)


# commas inside parentheses belong to a type: decimal(10,2)
_ENTRY_SEPARATOR = re.compile(r",(?![^(]*\))")


def _entries(text: str, param: str) -> list[str]:
    """Comma-separated entries; an empty one is a typo (',,'), not something to skip."""
    parts = [p.strip() for p in _ENTRY_SEPARATOR.split(text)]
    for i, part in enumerate(parts, 1):
        if not part:
            raise click.BadParameter(
                f"entry {i} of {text!r} is empty (a doubled or trailing comma?)",
                param_hint=param,
            )
    return parts


def _split_list(text: str | None, param: str = "--primary-key") -> list[str]:
    return _entries(text, param) if text and text.strip() else []


def utc_time(ms: int | None) -> str:
    if ms is None:
        return ""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def print_arrow(console: Console, data: pa.Table, title: str, limit: int = 50) -> None:
    out = RichTable(title=title)
    for name in data.column_names:
        out.add_column(name)
    for row in data.slice(0, limit).to_pylist():
        out.add_row(*("∅" if v is None else str(v) for v in row.values()))
    console.print(out)
    if data.num_rows > limit:
        console.print(f"... {data.num_rows - limit} more rows")


def click_error(e: Exception) -> click.ClickException:
    return click.ClickException(str(e))


@click.group()
def table() -> None:
    """Create, inspect and read FileStore tables."""


@table.command("create")
@click.argument("name")
@click.option(
    "--schema", "schema_text", required=True, help="Columns, e.g. 'id:int64 not null,name:string'."
)
@click.option("--primary-key", "-k", default="", help="Comma-separated primary key columns.")
@click.option("--partition-by", "-p", default="", help="Comma-separated partition columns.")
@click.option(
    "--option", "-o", "options", multiple=True, help="Table option key=value (repeatable)."
)
@warehouse_option
def create(
    name: str,
    schema_text: str,
    primary_key: str,
    partition_by: str,
    options: tuple[str, ...],
    warehouse: str,
) -> None:
    """Create table NAME ('db.table')."""
    try:
        t = Catalog(warehouse).create_table(
            name,
            parse_schema(schema_text),
            _split_list(primary_key, "--primary-key"),
            _split_list(partition_by, "--partition-by"),
            _key_values(options, "--option"),
        )
    except FileStoreError as e:
        raise click_error(e) from None
    click.echo(f"created {t.name} at {t.paths.root}")


def _key_values(pairs: tuple[str, ...], param: str) -> dict[str, str]:
    out = {}
    for o in pairs:
        if "=" not in o:
            raise click.BadParameter(f"{o!r} is not key=value", param_hint=param)
        k, v = o.split("=", 1)
        out[k.strip()] = v.strip()
    return out


@table.command("alter")
@click.argument("name")
@click.option("--set", "set_", multiple=True, help="Set table option key=value (repeatable).")
@click.option("--unset", multiple=True, help="Remove table option KEY (repeatable).")
@warehouse_option
def alter(name: str, set_: tuple[str, ...], unset: tuple[str, ...], warehouse: str) -> None:
    """Change table NAME's options, as ALTER TABLE ... SET TBLPROPERTIES.

    \b
    e.g. dts table alter shop.orders --set metadata.iceberg.storage=table-location
    """
    if not set_ and not unset:
        raise click.UsageError("give --set key=value or --unset key")
    try:
        t = Catalog(warehouse).get_table(name)
        schema = t.set_options(_key_values(set_, "--set"), unset=list(unset))
    except FileStoreError as e:
        raise click_error(e) from None
    click.echo(f"altered {t.name}: schema {schema.id}")
    if schema.core_options.iceberg_storage != "disabled":
        click.echo(IcebergSync(t).describe())


@table.command("list")
@click.option("--db", default=None, help="Only this database.")
@warehouse_option
def list_(db: str | None, warehouse: str) -> None:
    """List tables."""
    for name in Catalog(warehouse).list_tables(db):
        click.echo(name)


@table.command("describe")
@click.argument("name")
@warehouse_option
def describe(name: str, warehouse: str) -> None:
    """Show a table's schema, keys, options and latest snapshot."""
    try:
        t = Catalog(warehouse).get_table(name)
        schema = t.schema
        latest = t.latest_snapshot()
    except FileStoreError as e:
        raise click_error(e) from None
    console = Console()
    cols = RichTable(title=f"{t.name} (schema {schema.id})")
    for c in ("column", "type", "nullable", "key"):
        cols.add_column(c)
    for f in schema.arrow_schema:
        key = (
            "primary"
            if f.name in schema.primary_key
            else ("partition" if f.name in schema.partition_keys else "")
        )
        cols.add_row(f.name, str(f.type), str(f.nullable), key)
    console.print(cols)
    console.print(f"location: {t.paths.root}")
    console.print(f"options: {schema.options or {}}")
    if schema.core_options.iceberg_storage != "disabled":
        console.print(IcebergSync(t).describe())
    if latest is None:
        console.print("no snapshots yet")
    else:
        console.print(
            f"latest snapshot: {latest.id} ({latest.commit_kind}, {utc_time(latest.time_millis)}, "
            f"barrier {latest.barrier}, {latest.total_record_count} records in files)"
        )
    _print_consumers(console, t)


def _print_consumers(console: Console, t: Table) -> None:
    """The streams whose position holds back expiration, and until when."""
    lapse_ms = t.schema.core_options.consumer_expiration_ms
    for c in t.consumers():
        console.print(
            f"consumer {c.consumer_id}: reads snapshot {c.next_snapshot} next, keeps "
            f"snapshots from {max(c.next_snapshot - 1, 1)} until "
            f"{utc_time(c.updated_ms + lapse_ms)} unless it moves "
            f"(updated {utc_time(c.updated_ms)}; drop it with "
            f"dts table drop-consumer {t.name} {c.consumer_id})"
        )


@table.command("drop-consumer")
@click.argument("name")
@click.argument("consumer_id")
@warehouse_option
def drop_consumer(name: str, consumer_id: str, warehouse: str) -> None:
    """Forget stream CONSUMER_ID's position in table NAME (its stream is gone for good):
    expiration no longer keeps what it had still to read."""
    try:
        dropped = Catalog(warehouse).get_table(name).delete_consumer(consumer_id)
    except FileStoreError as e:
        raise click_error(e) from None
    if not dropped:
        raise click.ClickException(f"table {name} has no consumer {consumer_id!r}")
    click.echo(f"dropped consumer {consumer_id} of {name}")


@table.command("drop")
@click.argument("name")
@click.option("--if-exists", is_flag=True, help="No error when the table is missing.")
@warehouse_option
def drop(name: str, if_exists: bool, warehouse: str) -> None:
    """Drop a table and its files."""
    try:
        Catalog(warehouse).drop_table(name, ignore_if_missing=if_exists)
    except FileStoreError as e:
        raise click_error(e) from None
    click.echo(f"dropped {name}")


@table.command("scan")
@click.argument("name")
@click.option("--snapshot", "snapshot_id", type=int, default=None, help="Read this snapshot id.")
@click.option("--barrier", type=int, default=None, help="Read the snapshot at this barrier.")
@click.option("--timestamp", type=int, default=None, help="Read the snapshot at this epoch ms.")
@click.option("--columns", "-c", default="", help="Comma-separated columns to show.")
@click.option("--limit", "-n", type=int, default=50, show_default=True)
@warehouse_option
def scan(
    name: str,
    snapshot_id: int | None,
    barrier: int | None,
    timestamp: int | None,
    columns: str,
    limit: int,
    warehouse: str,
) -> None:
    """Print a table's rows (merged, at the latest or a chosen snapshot)."""
    try:
        t = Catalog(warehouse).get_table(name)
        data = t.read(
            snapshot_id,
            columns=_split_list(columns, "--columns") or None,
            barrier=barrier,
            timestamp=timestamp,
        )
    except FileStoreError as e:
        raise click_error(e) from None
    print_arrow(Console(), data, f"{t.name}: {data.num_rows} rows", limit)


@table.command("snapshots")
@click.argument("name")
@warehouse_option
def snapshots(name: str, warehouse: str) -> None:
    """List a table's snapshots."""
    try:
        t = Catalog(warehouse).get_table(name)
        snaps = t.snapshots()
    except FileStoreError as e:
        raise click_error(e) from None
    out = RichTable(title=f"{t.name} snapshots")
    for c in (
        "id",
        "kind",
        "time (UTC)",
        "user",
        "identifier",
        "barrier",
        "log offsets",
        "records",
        "delta",
    ):
        out.add_column(c)
    for s in snaps:
        out.add_row(
            str(s.id),
            s.commit_kind,
            utc_time(s.time_millis),
            s.commit_user,
            str(s.commit_identifier),
            "" if s.barrier is None else str(s.barrier),
            str(s.log_offsets or ""),
            str(s.total_record_count),
            str(s.delta_record_count),
        )
    Console().print(out)


# -- lifecycle (issue 3) -----------------------------------------------------
def _partition_filter(pairs: tuple[str, ...]) -> dict[str, str | None] | None:
    out: dict[str, str | None] = {}
    for pair in pairs:
        if "=" not in pair:
            raise click.BadParameter(f"{pair!r} is not k=v", param_hint="--partition")
        k, v = pair.split("=", 1)
        out[k.strip()] = v
    return out or None


@table.command("compact")
@click.argument("name")
@click.option("--full", is_flag=True, help="Merge every bucket into one sorted run.")
@click.option("--partition", "partitions", multiple=True, help="Only this partition (k=v).")
@warehouse_option
def compact(name: str, full: bool, partitions: tuple[str, ...], warehouse: str) -> None:
    """Compact a table's buckets (universal compaction; --full rewrites everything)."""
    wanted = _partition_filter(partitions)
    try:
        t = Catalog(warehouse).get_table(name)
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
        ) as bar:
            task = bar.add_task(f"compacting {t.name}", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            result = t.compact(full=full, partition=wanted, progress=progress)
    except FileStoreError as e:
        raise click_error(e) from None
    if result.snapshot is None:
        click.echo(f"{name}: nothing to compact")
        return
    click.echo(
        f"{name}: compacted {result.buckets} buckets, {result.files_before} -> "
        f"{result.files_after} files, {result.rows_before} -> {result.rows_after} rows, "
        f"{result.bytes_before} -> {result.bytes_after} bytes in {result.seconds:.2f}s "
        f"(snapshot {result.snapshot.id})"
    )


@table.command("expire")
@click.argument("name")
@click.option("--retain-min", type=int, default=None, help="Keep at least this many snapshots.")
@click.option("--retain-max", type=int, default=None, help="Keep at most this many snapshots.")
@click.option("--older-than", default=None, help="Expire snapshots older than this (e.g. '1 h').")
@warehouse_option
def expire(
    name: str,
    retain_min: int | None,
    retain_max: int | None,
    older_than: str | None,
    warehouse: str,
) -> None:
    """Expire old snapshots and delete the files only they referenced."""
    try:
        t = Catalog(warehouse).get_table(name)
        older = parse_duration_ms(older_than, "--older-than") if older_than else None
        r = t.expire(retain_min=retain_min, retain_max=retain_max, older_than_ms=older)
    except FileStoreError as e:
        raise click_error(e) from None
    click.echo(
        f"{name}: expired {len(r.expired_snapshots)} snapshots, deleted "
        f"{r.deleted_data_files} data files, {r.deleted_changelog_files} changelog files, "
        f"{r.deleted_manifests} manifests; earliest snapshot is {r.earliest}"
    )


@table.command("remove-orphans")
@click.argument("name")
@click.option("--older-than", default="1 d", show_default=True, help="Safety window.")
@click.option("--dry-run", is_flag=True, help="Only list what would be deleted.")
@warehouse_option
def remove_orphans(name: str, older_than: str, dry_run: bool, warehouse: str) -> None:
    """Delete files no snapshot or tag references that are older than the safety window."""
    try:
        t = Catalog(warehouse).get_table(name)
        r = t.remove_orphans(parse_duration_ms(older_than, "--older-than"), dry_run=dry_run)
    except FileStoreError as e:
        raise click_error(e) from None
    for path in r.deleted:
        click.echo(("would delete " if dry_run else "deleted ") + path)
    click.echo(
        f"{name}: {len(r.deleted)} orphan files ({r.bytes} bytes) "
        f"{'found' if dry_run else 'deleted'}; {r.kept_recent} younger than {older_than} kept"
    )


@table.command("rollback")
@click.argument("name")
@click.option("--snapshot", "snapshot_id", type=int, default=None, help="Roll back to this id.")
@click.option("--tag", "tag_name", default=None, help="Roll back to this tag.")
@warehouse_option
def rollback(name: str, snapshot_id: int | None, tag_name: str | None, warehouse: str) -> None:
    """Make an older snapshot (or a tag) the table's latest state; stop writers first."""
    if (snapshot_id is None) == (tag_name is None):
        raise click.UsageError("give exactly one of --snapshot or --tag")
    try:
        r = Catalog(warehouse).get_table(name).rollback_to(snapshot_id, tag=tag_name)
    except FileStoreError as e:
        raise click_error(e) from None
    click.echo(
        f"{name}: rolled back to snapshot {r.snapshot.id}; removed snapshots "
        f"{r.removed_snapshots or 'none'}, deleted {r.deleted_files} files"
    )
