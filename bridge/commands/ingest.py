"""`dts ingest`: copy an external Debezium topic into a table's log, exactly once."""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

from bridge.commands.heap import freeze_start_up_objects
from bridge.tables import bucketer_for, log_spec_for
from filestore import Catalog, Table
from filestore.errors import FileStoreError
from logstore.errors import BadSourceRecord, LogStoreError, SourceSchemaChanged, WriterStuckError
from logstore.ingest import Ingestor, IngestStats
from logstore.topics import ensure_reachable


@click.command()
@click.option(
    "--from-topic", "from_topic", required=True, help="Source topic with debezium-json records."
)
@click.option("--table", "table_name", required=True, help="Target table, e.g. db.orders.")
@click.option(
    "--warehouse",
    required=True,
    envvar="DTS_WAREHOUSE",
    help="FileStore warehouse holding the table.",
)
@click.option(
    "--bootstrap",
    default="127.0.0.1:9092",
    show_default=True,
    envvar="DTS_BOOTSTRAP",
    help="Kafka bootstrap servers (source and log on one cluster).",
)
@click.option(
    "--group",
    default=None,
    help="Consumer group of the source offsets [default: dts-ingest-<log topic>].",
)
@click.option(
    "--barrier-interval",
    type=float,
    default=None,
    help="Seconds per barrier [default: the table's barrier.interval].",
)
@click.option(
    "--decimal-mode",
    type=click.Choice(["precise", "string", "double"]),
    default="precise",
    show_default=True,
    help="How records without a schema carry DECIMALs: the connector's "
    "decimal.handling.mode (precise: base64 of the unscaled bytes; string; double). "
    "Records with a schema say for themselves.",
)
@click.option(
    "--lenient",
    is_flag=True,
    help="Send bad source records to <from-topic>.dlq instead of stopping.",
)
@click.option(
    "--transaction-topic",
    default=None,
    help="Debezium's transaction topic (provide.transaction.metadata=true, "
    "<topic.prefix>.transaction): barriers then never split a source transaction.",
)
@click.option(
    "--evolve-schema",
    is_flag=True,
    help="Add columns that appear in the source to the table (nullable) and go on; "
    "without it a new column stops the ingest (after committing what precedes it).",
)
@click.option(
    "--idle-exit",
    type=float,
    default=None,
    help="Exit after this many seconds without source records.",
)
def ingest(
    from_topic: str,
    table_name: str,
    warehouse: str,
    bootstrap: str,
    group: str | None,
    barrier_interval: float | None,
    decimal_mode: str,
    lenient: bool,
    transaction_topic: str | None,
    evolve_schema: bool,
    idle_exit: float | None,
) -> None:
    """Copy --from-topic into the table's log with barriers (consume-transform-produce,
    source offsets committed in the log's transactions). Stops cleanly on Ctrl-C/SIGTERM."""
    try:
        table = Catalog(warehouse).get_table(table_name)
        interval = (
            barrier_interval
            if barrier_interval is not None
            else table.schema.core_options.barrier_interval_ms / 1000
        )
        ensure_reachable(bootstrap)  # one clear error in seconds, not a raw one per call
    except (FileStoreError, LogStoreError) as exc:
        raise click.ClickException(str(exc)) from exc

    def new_ingestor() -> Ingestor:
        try:
            return Ingestor(
                bootstrap,
                from_topic,
                log_spec_for(table),  # the table's latest schema
                bucketer_for(table),
                group_id=group,
                barrier_interval_s=interval,
                lenient=lenient,
                decimal_mode=decimal_mode,
                transaction_topic=transaction_topic,
            )
        except LogStoreError as exc:
            raise click.ClickException(str(exc)) from exc

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    def progress(stats: IngestStats) -> None:
        click.echo(
            f"barrier {stats.last_barrier}: {stats.records:,} records -> {stats.rows:,} rows, "
            f"{stats.dead_letters:,} dead letters",
            err=True,
        )

    ingestor = new_ingestor()  # before saying where it ingests: start-up is done then
    freeze_start_up_objects()
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    click.echo(
        f"ingesting {from_topic} -> {log_spec_for(table).topic} ({table.name}) on {bootstrap}; "
        "Ctrl-C to stop",
        err=True,
    )
    total = IngestStats()
    try:
        while True:
            try:
                stats = ingestor.run(stop=stop, idle_exit_s=idle_exit, on_barrier=progress)
                _add(total, stats)
                break
            except SourceSchemaChanged as exc:
                _add(total, ingestor.stats)  # what preceded the new columns is committed
                if not evolve_schema:
                    raise click.ClickException(f"ingest stopped: {exc}") from exc
                _evolve(table, exc)
            except WriterStuckError as exc:
                # a Kafka client wedged by a broker failure: a fresh one fences it and
                # resumes at the last committed barrier (the open one is aborted)
                _add(total, ingestor.committed)  # the open barrier's records are copied again
                click.echo(f"restarting the ingest: {exc}", err=True)
            finally:
                ingestor.close()
            ingestor = new_ingestor()  # resumes at the new columns' record, or the last barrier
    except BadSourceRecord as exc:
        raise click.ClickException(f"ingest stopped: {exc}") from exc
    except (FileStoreError, LogStoreError) as exc:
        raise click.ClickException(f"ingest stopped, the open barrier was aborted: {exc}") from exc
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    click.echo(
        f"done: {total.records:,} records, {total.rows:,} rows, {total.barriers} barriers, "
        f"{total.dead_letters} dead letters, {total.truncates} truncates, "
        f"{total.skipped} heartbeats/schema events skipped"
    )


def _add(total: IngestStats, stats: IngestStats) -> None:
    for f in ("records", "rows", "barriers", "dead_letters", "truncates", "skipped"):
        setattr(total, f, getattr(total, f) + getattr(stats, f))


def _evolve(table: Table, exc: SourceSchemaChanged) -> None:
    """Add the source's new columns to the table (nullable); the copy resumes at the
    record that carries them, whose offset the stop committed."""
    for name, arrow_type in exc.fields.items():
        if name not in table.schema.arrow_schema.names:
            table.add_column(name, arrow_type)
    added = ", ".join(f"{n} {t}" for n, t in exc.fields.items())
    click.echo(
        f"schema: added {added} to {table.name} (at {exc.topic}[{exc.partition}]@{exc.offset})",
        err=True,
    )
