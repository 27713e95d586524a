"""`dts broker`."""

from __future__ import annotations

import click


@click.command()
def broker() -> None:
    """Not built yet."""
    raise click.ClickException("dts broker is not built yet")
