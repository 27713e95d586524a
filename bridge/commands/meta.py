"""`dts meta ...` commands."""

from __future__ import annotations

import click


@click.group()
def meta() -> None:
    """meta commands (being built)."""
