"""`dts worker` command line behaviour that needs no broker."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from bridge.cli import cli


def test_worker_without_tables_explains_what_to_do(warehouse: Path) -> None:
    result = CliRunner().invoke(
        cli, ["worker", "--warehouse", str(warehouse), "--bootstrap", "127.0.0.1:1"]
    )
    assert result.exit_code == 1
    assert "no table with a log tier" in result.output
    assert "dts table create" in result.output


def test_worker_help_names_its_options() -> None:
    result = CliRunner().invoke(cli, ["worker", "--help"])
    assert result.exit_code == 0
    for opt in ("--warehouse", "--bootstrap", "--tables", "--web-port", "--group"):
        assert opt in result.output
