"""`dts demo`."""

from __future__ import annotations

import click


@click.command()
def demo() -> None:
    """Not built yet."""
    raise click.ClickException("dts demo is not built yet")
