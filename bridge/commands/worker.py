"""`dts worker`."""

from __future__ import annotations

import click


@click.command()
def worker() -> None:
    """Not built yet."""
    raise click.ClickException("dts worker is not built yet")
