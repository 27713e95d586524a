"""`dts demo`: the whole product in one command (logic in ``bridge.demo``)."""

from __future__ import annotations

import sys

import click


@click.command()
@click.option(
    "--warehouse",
    default=None,
    help="Keep the demo's warehouse in this (empty or new) directory "
    "(default: a temp dir, removed at the end).",
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
def demo(warehouse: str | None, keep_running: bool, stream_seconds: float) -> None:
    """Run a CDC pipeline end to end on an embedded broker and a local warehouse.

    A CDC generator feeds orders and customers through the LogStore; the worker
    commits them to the FileStore at every barrier; two Spark streaming jobs derive
    orders_enriched and customer_totals (carrying the source barriers); then a strong
    and a weak consistent read, a time-travel query and an atomic CTAS. Finishes by
    itself in about 1.5-3 minutes and stops everything it started (also on Ctrl-C).
    """
    from rich.console import Console

    from bridge.demo import DemoOptions, run_demo
    from bridge.demo.pipeline import DemoError

    console = Console()
    options = DemoOptions(
        warehouse=warehouse, keep_running=keep_running, stream_seconds=stream_seconds
    )
    try:
        run = run_demo(options, console)
    except DemoError as e:
        console.print("[red]demo failed; everything it started was stopped[/]")
        raise click.ClickException(str(e)) from None
    if run.interrupted:
        console.print("stopped: every process the demo started has exited")
        sys.exit(130)
    console.rule("[bold green]done")
    if warehouse is not None:
        console.print(f"warehouse kept at {run.warehouse}")
    else:
        console.print("everything stopped; temporary warehouse removed")
    if run.strong is not None and not run.strong.agreed:
        raise click.ClickException("the strong consistent read did not agree: see the report")
