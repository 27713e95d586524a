"""`dts ingest`."""

from __future__ import annotations

import click


@click.command()
def ingest() -> None:
    """Not built yet."""
    raise click.ClickException("dts ingest is not built yet")
