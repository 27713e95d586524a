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


def test_unknown_table_is_one_error_line_without_traceback(warehouse: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bridge",
            "worker",
            "--warehouse",
            str(warehouse),
            "--bootstrap",
            "127.0.0.1:1",
            "--tables",
            "shop.nope",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [f"Error: table shop.nope does not exist in {warehouse}"]


def test_help_shows_the_environment_variables_that_fill_options() -> None:
    result = CliRunner().invoke(cli, ["worker", "--help"], terminal_width=200)
    assert "env var: DTS_WAREHOUSE" in result.output
    assert "env var: DTS_BOOTSTRAP" in result.output
