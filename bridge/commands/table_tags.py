"""`dts table tag`: tags (named snapshots that survive expiration), and one tag at the
consistent barrier of a set of tables (an Iceberg tag too)."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table as RichTable

from bridge.commands.table import click_error, utc_time, warehouse_option
from filestore import Catalog, FileStoreError


@click.group("tag")
def tag() -> None:
    """Create, list and delete tags (named snapshots that survive expiration)."""


@tag.command("create")
@click.argument("name")
@click.argument("tag_name")
@click.option("--snapshot", "snapshot_id", type=int, default=None, help="Default: latest.")
@warehouse_option
def tag_create(name: str, tag_name: str, snapshot_id: int | None, warehouse: str) -> None:
    """Tag a snapshot of table NAME as TAG_NAME."""
    try:
        snap = Catalog(warehouse).get_table(name).create_tag(tag_name, snapshot_id)
    except FileStoreError as e:
        raise click_error(e) from None
    click.echo(f"{name}: tag {tag_name} -> snapshot {snap.id}")


@tag.command("consistent")
@click.argument("tag_name")
@click.argument("tables", nargs=-1, required=True)
@click.option(
    "--meta-url",
    envvar="DTS_META_URL",
    default=None,
    help="MetaService address (env DTS_META_URL); without it, from the tables' snapshots.",
)
@click.option("--replace", is_flag=True, help="Move the tag where the tables have it already.")
@warehouse_option
def tag_consistent_(
    tag_name: str, tables: tuple[str, ...], meta_url: str | None, replace: bool, warehouse: str
) -> None:
    """Tag TABLES at their consistent barrier as TAG_NAME (an Iceberg tag too).

    \b
    e.g. dts table tag consistent eod shop.orders shop.customer_totals
    """
    from bridge.consistency_read import tag_consistent
    from bridge.meta.errors import MetaError

    try:
        pinned = tag_consistent(
            Catalog(warehouse), list(tables), tag_name, meta_url=meta_url, replace=replace
        )
    except (FileStoreError, MetaError) as e:
        raise click_error(e) from None
    for name, snap in pinned.items():
        click.echo(f"{name}: tag {tag_name} -> snapshot {snap.id} (barrier {snap.barrier})")


@tag.command("list")
@click.argument("name")
@warehouse_option
def tag_list(name: str, warehouse: str) -> None:
    """List the tags of table NAME."""
    try:
        tags = Catalog(warehouse).get_table(name).list_tags()
    except FileStoreError as e:
        raise click_error(e) from None
    out = RichTable(title=f"{name} tags")
    for c in ("tag", "snapshot", "time (UTC)", "barrier", "records"):
        out.add_column(c)
    for tag_name, s in tags:
        barrier = "" if s.barrier is None else str(s.barrier)
        out.add_row(
            tag_name, str(s.id), utc_time(s.time_millis), barrier, str(s.total_record_count)
        )
    Console().print(out)


@tag.command("delete")
@click.argument("name")
@click.argument("tag_name")
@warehouse_option
def tag_delete(name: str, tag_name: str, warehouse: str) -> None:
    """Delete tag TAG_NAME of table NAME."""
    try:
        snap = Catalog(warehouse).get_table(name).delete_tag(tag_name)
    except FileStoreError as e:
        raise click_error(e) from None
    click.echo(f"{name}: deleted tag {tag_name} (snapshot {snap.id})")
