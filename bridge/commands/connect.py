"""`dts connect postgres`: a local Kafka Connect worker with Debezium's PostgreSQL
connector set as dts reads it best, for trying dts on a real database.

Production users run their own Connect cluster and point `dts ingest` at its topics.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import click

from bridge.commands.signals import stop_on_signal
from logstore.connect import ConnectWorker, postgres_connector
from logstore.errors import ConnectStartError


@click.group()
def connect() -> None:
    """Run a local Kafka Connect worker with a Debezium connector."""


@connect.command("postgres")
@click.option(
    "--dsn",
    required=True,
    help="The database: postgresql://USER[:PASSWORD]@HOST:PORT/DBNAME (wal_level=logical; "
    "the user needs the REPLICATION attribute).",
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
def postgres(
    dsn: str, tables: str, topic_prefix: str, bootstrap: str, data: Path, name: str
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
        password=url.password or "",
        dbname=url.path[1:],
        tables=captured,
        topic_prefix=topic_prefix,
    )
    try:
        with (
            stop_on_signal() as stop,
            ConnectWorker(bootstrap, config, work_dir=data.resolve()) as worker,
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
