"""`dts table ...` commands."""

from __future__ import annotations

import click


@click.group()
def table() -> None:
    """table commands (being built)."""
