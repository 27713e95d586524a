"""`dts connect postgres`: a local Kafka Connect worker with Debezium's PostgreSQL
connector set as dts reads it best, for trying dts on a real database.

Production users run their own Connect cluster and point `dts ingest` at its topics.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

import click

from bridge.commands.signals import stop_on_signal
from logstore.connect import ConnectWorker, postgres_connector
from logstore.errors import ConnectStartError, TopicError
from logstore.topics import create_topic


@click.group()
def connect() -> None:
    """Run a local Kafka Connect worker with a Debezium connector."""


@connect.command("postgres")
@click.option(
    "--dsn",
    required=True,
    help="The database: postgresql://USER[:PASSWORD]@HOST:PORT/DBNAME (wal_level=logical; "
    "the user needs the REPLICATION attribute). Without a password in it, $PGPASSWORD.",
)
@click.option(
    "--tables",
    required=True,
    help="Comma-separated schema.table names to capture, e.g. public.orders,public.customers.",
)
@click.option(
    "--topic-prefix",
    default="pg",
    show_default=True,
    help="Topics are <prefix>.<schema>.<table>; transactions go to <prefix>.transaction.",
)
@click.option("--bootstrap", envvar="DTS_BOOTSTRAP", default="127.0.0.1:9092", show_default=True)
@click.option(
    "--data",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("connect-data"),
    show_default=True,
    help="The worker's directory: its offsets (a restart resumes there) and its log.",
)
@click.option("--name", default="dts-postgres", show_default=True, help="The connector's name.")
@click.option(
    "--rest-port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Port of the worker's REST API on 127.0.0.1 (0: any free port).",
)
def postgres(
    dsn: str, tables: str, topic_prefix: str, bootstrap: str, data: Path, name: str, rest_port: int
) -> None:
    """Capture PostgreSQL tables with Debezium (pgoutput, transaction metadata on, decimals
    as exact text) into Kafka; print the topics and the one `dts ingest` command that reads
    them; stop on Ctrl-C or SIGTERM."""
    url = urlsplit(dsn)
    if url.scheme not in ("postgresql", "postgres") or not url.hostname or not url.path[1:]:
        raise click.BadParameter(
            "expected postgresql://USER[:PASSWORD]@HOST:PORT/DBNAME", param_hint="--dsn"
        )
    captured = [t.strip() for t in tables.split(",") if t.strip()]
    config = postgres_connector(
        name,
        host=url.hostname,
        port=url.port or 5432,
        user=url.username or "postgres",
        # libpq's variable: a password kept out of the command line (and `ps`)
        password=url.password or os.environ.get("PGPASSWORD", ""),
        dbname=url.path[1:],
        tables=captured,
        topic_prefix=topic_prefix,
    )
    # made before the connector starts, so that `dts ingest` can start at once: the
    # connector writes the transaction topic and an empty table's topic only at their first
    # event (one partition each, as the connector's own topics get them)
    try:
        for t in [*captured, "transaction"]:
            create_topic(bootstrap, f"{topic_prefix}.{t}", 1, {})
    except TopicError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        with (
            stop_on_signal() as stop,
            ConnectWorker(
                bootstrap, config, work_dir=data.resolve(), rest_port=rest_port
            ) as worker,
        ):
            click.echo(f"Kafka Connect REST: {worker.rest_url} (log: {worker.log_path})")
            click.echo(f"transactions: {topic_prefix}.transaction")
            for t in captured:
                click.echo(f"{topic_prefix}.{t} -> dts ingest (the table's topic)")
            # one ingest for the database: its tables share every barrier
            mapping = ",".join(f"{t}=<db.{t.rsplit('.', 1)[-1]}>" for t in captured)
            click.echo(f"ingest: dts ingest --topic-prefix {topic_prefix} --tables {mapping}")
            click.echo("Ctrl-C to stop", err=True)
            while not stop.wait(0.5):
                if not worker.running:
                    raise click.ClickException(f"the worker exited; see {worker.log_path}")
        click.echo("connect stopped", err=True)
    except ConnectStartError as exc:
        raise click.ClickException(str(exc)) from exc
