"""`dts ingest`: copy external Debezium topics into tables' logs, exactly once.

Several topics of one source database go through one ingest (``--topic-prefix`` with
``--tables``, or repeated ``--from-topic``/``--table``): their logs share every barrier,
so a consistent read across the tables shows the database at one committed transaction.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

from bridge.commands.heap import freeze_start_up_objects
from bridge.tables import bucketer_for, log_spec_for
from filestore import Catalog, Table
from filestore.errors import FileStoreError
from logstore.errors import BadSourceRecord, LogStoreError, SourceSchemaChanged, WriterRestartError
from logstore.ingest import Ingestor, IngestSource, IngestStats
from logstore.spec import DECIMAL_MODES
from logstore.spec import decimal_mode as parse_decimal_mode
from logstore.topics import ensure_reachable


@click.command()
@click.option(
    "--from-topic",
    "from_topics",
    multiple=True,
    help="Source topic with debezium-json records (repeatable, paired with --table).",
)
@click.option(
    "--table", "table_names", multiple=True, help="Target table, e.g. db.orders (repeatable)."
)
@click.option(
    "--topic-prefix",
    default=None,
    help="The connector's topic.prefix: with --tables, reads <prefix>.<schema>.<table> and "
    "the transaction topic <prefix>.transaction (unless --transaction-topic says otherwise).",
)
@click.option(
    "--tables",
    "table_map",
    default=None,
    help="With --topic-prefix: source=table pairs, e.g. "
    "'public.accounts=bank.accounts,public.transfers=bank.transfers'.",
)
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
    help="Consumer group of the source offsets [default: dts-ingest-<topic prefix>, else "
    "dts-ingest-<the first table's log topic>]; keep it when adding a table.",
)
@click.option(
    "--barrier-interval",
    type=float,
    default=None,
    help="Seconds per barrier [default: the table's barrier.interval].",
)
@click.option(
    "--decimal-mode",
    type=click.Choice(DECIMAL_MODES),
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
    from_topics: tuple[str, ...],
    table_names: tuple[str, ...],
    topic_prefix: str | None,
    table_map: str | None,
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
    """Copy source topics into their tables' logs with barriers (consume-transform-produce,
    source offsets committed in the logs' transactions); the tables of one ingest share
    every barrier. Stops cleanly on Ctrl-C/SIGTERM.

    \b
    one topic:   dts ingest --from-topic pg.public.orders --table shop.orders
    a database:  dts ingest --topic-prefix pg \\
                   --tables public.accounts=bank.accounts,public.transfers=bank.transfers
    """
    pairs = _pairs(from_topics, table_names, topic_prefix, table_map)
    if topic_prefix and transaction_topic is None:
        transaction_topic = f"{topic_prefix}.transaction"
    try:
        catalog = Catalog(warehouse)
        tables = {topic: catalog.get_table(name) for topic, name in pairs}
        # with --topic-prefix, each topic's table as Debezium's END events name it
        collections = {topic: topic.removeprefix(f"{topic_prefix}.") for topic, _ in pairs}
        first = next(iter(tables.values()))
        interval = (
            barrier_interval
            if barrier_interval is not None
            else first.schema.core_options.barrier_interval_ms / 1000
        )
        ensure_reachable(bootstrap)  # one clear error in seconds, not a raw one per call
    except (FileStoreError, LogStoreError) as exc:
        raise click.ClickException(str(exc)) from exc
    if group is None and (topic_prefix or len(pairs) > 1):
        group = f"dts-ingest-{topic_prefix or log_spec_for(first).topic}"

    def new_ingestor() -> Ingestor:
        (topic, table), *more = tables.items()
        named = collections if topic_prefix else {}
        try:
            return Ingestor(
                bootstrap,
                topic,
                log_spec_for(table),  # the table's latest schema
                bucketer_for(table),
                group_id=group,
                # one writer per source database: a restart fences its predecessor
                transactional_id=group if len(pairs) > 1 else None,
                barrier_interval_s=interval,
                lenient=lenient,
                decimal_mode=parse_decimal_mode(decimal_mode),  # click.Choice checked it
                transaction_topic=transaction_topic,
                collection=named.get(topic),
                more=[
                    IngestSource(t, log_spec_for(x), bucketer_for(x), named.get(t)) for t, x in more
                ],
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
    for topic, table in tables.items():
        click.echo(f"ingesting {topic} -> {log_spec_for(table).topic} ({table.name})", err=True)
    click.echo(
        f"on {bootstrap}"
        + (f", transactions from {transaction_topic}" if transaction_topic else "")
        + (f", one barrier sequence for {len(tables)} tables" if len(tables) > 1 else "")
        + "; Ctrl-C to stop",
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
                _evolve(tables[exc.topic], exc)
            except WriterRestartError as exc:
                # a Kafka client wedged or a barrier failed by a broker failure: a fresh
                # one fences it and resumes at the last committed barrier (the open one is
                # aborted)
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


def _pairs(
    from_topics: tuple[str, ...],
    table_names: tuple[str, ...],
    topic_prefix: str | None,
    table_map: str | None,
) -> list[tuple[str, str]]:
    """(source topic, table) of every table the ingest writes."""
    if topic_prefix or table_map:
        if not (topic_prefix and table_map) or from_topics or table_names:
            raise click.UsageError(
                "give --topic-prefix with --tables, or --from-topic with --table, not both"
            )
        pairs = []
        for entry in table_map.split(","):
            source, sep, name = entry.strip().partition("=")
            if not sep or not source or not name:
                raise click.BadParameter(
                    f"{entry!r} is not source=table (e.g. public.orders=shop.orders)",
                    param_hint="--tables",
                )
            pairs.append((f"{topic_prefix}.{source.strip()}", name.strip()))
        return pairs
    if not from_topics or len(from_topics) != len(table_names):
        raise click.UsageError(
            "give each --from-topic its --table (in the same order), or --topic-prefix "
            "with --tables"
        )
    return list(zip(from_topics, table_names, strict=True))


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
