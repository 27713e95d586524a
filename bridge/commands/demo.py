"""`dts demo`: the whole product in one command (logic in ``bridge.demo``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from rich.console import Console

# what bridge.demo.rundir uses; not imported from there: importing bridge.demo loads the
# demo's whole pipeline, which every `dts` command would then pay for at start
ROOT_ENV = "DTS_DEMO_DIR"
DEFAULT_ROOT = "dts-demo"
#: columns of the demo's output when it is not a terminal (wide enough for every table)
PIPE_WIDTH = 160


@click.command()
@click.option(
    "--dir",
    "run_root",
    envvar=ROOT_ENV,
    default=DEFAULT_ROOT,
    show_default=True,
    type=click.Path(file_okay=False),
    help="Each run keeps its warehouse, logs and HTML report in DIR/run-<time>/ for "
    "exploring afterwards; `dts demo --clean` removes DIR.",
)
@click.option("--clean", is_flag=True, help="Remove the demo directory (every kept run) and exit.")
@click.option(
    "--warehouse",
    default=None,
    help="Put the demo's warehouse in this (empty or new) directory instead of the run's.",
)
@click.option(
    "--keep-running",
    is_flag=True,
    help="After the report, leave everything running for exploration (Ctrl-C stops it).",
)
@click.option(
    "--stream-seconds",
    type=click.FloatRange(1, 600),
    default=20.0,
    show_default=True,
    help="How long the generator and the streaming jobs run before the reads.",
)
@click.option(
    "--secure",
    is_flag=True,
    help="Secured as production is: the broker on SASL_SSL (SCRAM-SHA-512, certificates made "
    "at start, ACLs enforced), the MetaService over TLS with a token; every part configured "
    "through DTS_KAFKA_CONFIG, DTS_META_CA_FILE and DTS_META_TOKEN. Prints where the client "
    "properties file and the CA are, never a password or the token.",
)
def demo(
    run_root: str,
    clean: bool,
    warehouse: str | None,
    keep_running: bool,
    stream_seconds: float,
    secure: bool,
) -> None:
    """Run a CDC pipeline end to end on an embedded broker and a local warehouse.

    A CDC generator feeds orders and customers through the LogStore; the worker
    commits them to the FileStore at every barrier; two Spark streaming jobs derive
    orders_enriched and customer_totals (carrying the source barriers); then a strong
    and a weak consistent read, a time-travel query and an atomic CTAS. Finishes by
    itself in about 1.5-3 minutes, stops everything it started (also on Ctrl-C), and
    keeps the warehouse, the logs and an HTML report of freshness and consistency.
    """
    # bridge.demo loads the demo's stack (Prometheus client, plotly, HTTP): only for `dts demo`
    from bridge.demo import DemoOptions, run_demo
    from bridge.demo.errors import DemoError

    if clean:
        _clean(Path(run_root))
        return
    console = _console()
    options = DemoOptions(
        warehouse=warehouse,
        keep_running=keep_running,
        stream_seconds=stream_seconds,
        run_root=run_root,
        secure=secure,
    )
    try:
        run = run_demo(options, console)
    except DemoError as e:  # RunDirError too
        console.print("[red]demo failed; everything it started was stopped[/]")
        raise click.ClickException(str(e)) from None
    if run.interrupted:
        console.print("stopped: every process the demo started has exited")
        sys.exit(130)
    console.rule("[bold green]done")
    kept = "logs/, spark/, checkpoints/" + (", secure/ (mode 0700)" if secure else "")
    console.print(f"kept in {run.run_dir}: {kept}", soft_wrap=True)
    console.print(f"warehouse kept at {run.warehouse}", soft_wrap=True)
    if run.html_report:
        console.print(f"report: {Path(run.html_report).as_uri()}", soft_wrap=True)
    console.print(f"remove every kept run with: dts demo --clean --dir {run_root}", soft_wrap=True)
    console.print("everything stopped")
    if run.strong is not None and not run.strong.agreed:
        raise click.ClickException("the strong consistent read did not agree: see the report")


def _console() -> Console:
    """Full-width tables in a pipe or a log file too: rich falls back to 80 columns when
    output is not a terminal, which cut table cells to `sna…`."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=PIPE_WIDTH)
    return console


def _clean(root: Path) -> None:
    # importing bridge.demo.rundir loads all of bridge.demo: only for `dts demo --clean`
    from bridge.demo.errors import RunDirError
    from bridge.demo.rundir import clean

    try:
        runs = clean(root)
    except RunDirError as e:
        raise click.ClickException(str(e)) from None
    if runs:
        click.echo(f"removed {root} ({len(runs)} runs: {', '.join(runs)})")
    else:
        click.echo(f"nothing to remove: {root} does not exist")
