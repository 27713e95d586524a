"""`dts worker`: keep tables' FileStores up to date from their logs (Faust app)."""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any

import click

from bridge.commands.heap import freeze_start_up_objects
from bridge.commands.signals import sigterm_interrupt
from bridge.tables import log_spec_for
from filestore import Catalog
from logstore.acls import require_acls
from logstore.errors import NotAuthorizedError
from logstore.localhost import free_port
from logstore.topics import ensure_reachable

#: one line per record, no colour: what a log file or a log collector wants
PLAIN_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def plain_logging_config(level: str) -> dict[str, Any]:
    """Logging for a worker whose stderr is a file or a pipe (the demo's worker.log, a
    container): Faust's default handler colours its lines with terminal escape codes."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": PLAIN_LOG_FORMAT}},
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "plain",
                "level": level,
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": level, "handlers": ["default"]},
    }


@click.command()
@click.option(
    "--warehouse", "-w", envvar="DTS_WAREHOUSE", required=True, help="Warehouse root (path or URI)."
)
@click.option(
    "--bootstrap",
    "-b",
    envvar="DTS_BOOTSTRAP",
    default="127.0.0.1:9092",
    show_default=True,
    help="Kafka bootstrap servers.",
)
@click.option(
    "--tables",
    "-t",
    multiple=True,
    help="Tables to consume (db.table; repeat or comma-separate). Default: every table with a log.",
)
@click.option(
    "--web-port",
    type=int,
    default=6066,
    show_default=True,
    help="Port of /metrics and /status (0: any free port).",
)
@click.option(
    "--web-host", default="127.0.0.1", show_default=True, help="Address the web server binds."
)
@click.option(
    "--group",
    default="dts-worker",
    show_default=True,
    help="Consumer group: workers sharing it share the load.",
)
@click.option(
    "--session-timeout",
    type=float,
    default=6.0,
    show_default=True,
    help="Consumer-group session timeout in seconds: how fast a dead worker's buckets move "
    "(Apache Kafka accepts >= 6 by default).",
)
@click.option(
    "--meta-url",
    envvar="DTS_META_URL",
    default=None,
    help="MetaService URL: register job worker:<group>:<table> per table and report every "
    "committed barrier. Without it the worker runs on its own; an unreachable service never "
    "stops commits (reports are retried).",
)
@click.option(
    "--meta-heartbeat-timeout-ms",
    type=click.IntRange(100),
    default=None,
    help="Heartbeat timeout of the worker's MetaService jobs (default: the service's).",
)
@click.option(
    "--table-scan-interval",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds between catalog scans for tables created after start (0: off; only "
    "without --tables).",
)
@click.option(
    "--stall-after",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Seconds a bucket with records waiting may go without moving before the table "
    "counts as stalled (/status 'stalled', dts_worker_table_stalled). A failing table "
    "counts at once.",
)
@click.option(
    "--log-level",
    envvar="DTS_LOG_LEVEL",
    default="warning",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
)
def worker(
    warehouse: str,
    bootstrap: str,
    tables: tuple[str, ...],
    web_port: int,
    web_host: str,
    group: str,
    session_timeout: float,
    meta_url: str | None,
    meta_heartbeat_timeout_ms: int | None,
    table_scan_interval: float,
    stall_after: float,
    log_level: str,
) -> None:
    """Consume every table's log and commit one FileStore snapshot per barrier.

    Run several with the same --group to share the buckets; stop with Ctrl-C
    (or SIGTERM): buffered rows are dropped and redone from the last snapshot
    by whichever worker takes the buckets over.
    """
    # bridge.worker loads Faust: not for `dts --help` and the other commands
    import faust

    from bridge.worker.app import create_app
    from bridge.worker.config import WorkerConfig
    from bridge.worker.errors import NoTablesError
    from bridge.worker.tiers import discover_tables

    names = [n.strip() for t in tables for n in t.split(",") if n.strip()] or None
    port = web_port or free_port()
    config = WorkerConfig(
        warehouse=warehouse,
        bootstrap=bootstrap,
        tables=names,
        group=group,
        web_host=web_host,
        web_port=port,
        session_timeout_s=session_timeout,
        rebalance_timeout_s=session_timeout,
        heartbeat_interval_s=min(0.5, session_timeout / 6),
        meta_url=meta_url or None,
        meta_heartbeat_timeout_ms=meta_heartbeat_timeout_ms,
        table_scan_interval_s=max(table_scan_interval, 0.0),
        stall_after_s=stall_after,
    )
    # user errors that need no broker first (no such table, no table with a log); then one
    # clear error for a dead broker now rather than a raw client error per table
    found = discover_tables(Catalog(warehouse), config, ())
    if found:
        ensure_reachable(bootstrap)
        # on a cluster with ACLs, one line naming every ACL it lacks, rather than a
        # consumer group that waits in silence or a fetch that fails a table later
        topics = {log_spec_for(t).topic: ("DESCRIBE", "READ") for t in found}
        try:
            require_acls(bootstrap, "dts worker", topics, (group, ("READ",)))
        except NotAuthorizedError as exc:
            raise click.ClickException(str(exc)) from exc
    try:
        app = create_app(config)
    except NoTablesError as exc:
        raise click.ClickException(str(exc)) from exc
    # SIGTERM before Faust installs its handlers (its first second) ended the process
    # with no stop line; as KeyboardInterrupt it stops as Ctrl-C does. Faust replaces
    # this handler while it runs.
    signal.signal(signal.SIGTERM, sigterm_interrupt)
    base = f"http://{web_host}:{port}"
    # from here a SIGTERM is a KeyboardInterrupt: everything after it is inside the try,
    # so one that lands while the addresses print still ends with the stop line
    try:
        click.echo(f"dts worker {config.worker_id} (group {group})")
        click.echo(f"  broker     {bootstrap}")
        click.echo(f"  warehouse  {warehouse}")
        click.echo(f"  tables     {', '.join(sorted(app.status.tables))}")
        click.echo(f"  status     {base}/status")
        click.echo(f"  metrics    {base}/metrics")
        click.echo(f"  meta       {meta_url or '(none)'}")
        click.echo("  stop with Ctrl-C", nl=True)
        level = log_level.upper()
        logging.getLogger("bridge").setLevel(level)
        runner = faust.Worker(
            app,
            loglevel=level,
            redirect_stdouts=False,
            quiet=True,
            logging_config=plain_logging_config(level) if not sys.stderr.isatty() else None,
        )
        if not sys.stdout.isatty():
            # Faust's start-up spinner writes cursor escape codes even into a file
            runner.spinner = None
        freeze_start_up_objects()
        runner.execute_from_commandline()
    except KeyboardInterrupt:
        pass
    finally:
        committed = {
            name: t.last_barrier_committed for name, t in sorted(app.status.tables.items())
        }
        click.echo(f"dts worker {config.worker_id} stopped; last barriers committed: {committed}")
