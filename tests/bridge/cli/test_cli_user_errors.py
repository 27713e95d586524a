"""Every user error of the ``dts`` command line is one ``Error:`` line saying what to do.

Run as a user runs it (a subprocess, so a traceback or librdkafka's own stderr lines
would show), with nothing but a warehouse directory: no broker, no MetaService.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import click
from click.testing import CliRunner

from bridge.cli import cli


def dts(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def error_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in proc.stdout + proc.stderr
    return [line for line in proc.stderr.splitlines() if line.strip()]


def test_worker_pointed_at_a_dead_broker_ends_with_one_clear_error(warehouse: Path) -> None:
    created = dts(
        "table", "create", "shop.orders", "--schema", "id:int64 not null,v:string",
        "-k", "id", "--warehouse", str(warehouse),
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    started = time.monotonic()
    proc = dts("worker", "--warehouse", str(warehouse), "--bootstrap", "127.0.0.1:1")
    elapsed = time.monotonic() - started
    assert proc.returncode == 1
    lines = error_lines(proc)
    # librdkafka's "%3|...|FAIL|..." retry lines used to come first, hundreds of them
    assert len(lines) == 1, lines
    assert lines[0].startswith("Error: no Kafka broker answered at 127.0.0.1:1 within 5s")
    assert "`dts broker`" in lines[0] and "--bootstrap" in lines[0]
    assert elapsed < 60  # 5 s of probing plus start-up, not a retry loop


def test_ingest_from_a_dead_broker_is_one_clear_error(warehouse: Path) -> None:
    created = dts(
        "table", "create", "shop.ingested", "--schema", "id:int64 not null", "-k", "id",
        "--warehouse", str(warehouse),
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    proc = dts(
        "ingest", "--from-topic", "cdc.orders", "--table", "shop.ingested",
        "--warehouse", str(warehouse), "--bootstrap", "127.0.0.1:1",
    )  # fmt: skip
    assert proc.returncode == 1
    lines = error_lines(proc)
    assert len(lines) == 1, lines
    assert lines[0].startswith("Error: no Kafka broker answered at 127.0.0.1:1")


def test_schema_type_typo_names_the_known_types_and_no_file(warehouse: Path) -> None:
    result = CliRunner().invoke(
        cli,
        ["table", "create", "shop.t", "--schema", "id:int65", "--warehouse", str(warehouse)],
        terminal_width=400,
    )
    assert result.exit_code == 2
    assert "column 'id': unknown type 'int65'" in result.output
    assert "schema file" not in result.output
    assert "int64" in result.output and "decimal(p,s)" in result.output
    assert not (warehouse / "shop.db").exists()


def test_a_bad_log_level_in_the_environment_is_one_error_line() -> None:
    proc = dts("table", "list", env={"DTS_LOG_LEVEL": "loud"})
    assert proc.returncode == 2
    assert error_lines(proc)[-1] == (
        "Error: DTS_LOG_LEVEL='loud' is not a log level; use one of debug, info, warning, error"
    )


def test_meta_commands_take_meta_url_and_still_the_old_url() -> None:
    for flag in ("--meta-url", "--url"):
        proc = dts("meta", "tables", flag, "http://127.0.0.1:1")
        assert proc.returncode == 1, proc.stderr  # reached the client: not a usage error
        lines = error_lines(proc)
        assert len(lines) == 1, lines
        assert lines[0].startswith("Error: unavailable: MetaService at http://127.0.0.1:1")
        assert "`dts meta serve`" in lines[0] and "--meta-url" in lines[0]
    shown = CliRunner().invoke(cli, ["meta", "tables", "--help"], terminal_width=200).output
    assert "--meta-url" in shown and "--url" not in shown.replace("--meta-url", "")


def _commands(group: click.Group, path: str = "dts") -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = []
    for name, cmd in group.commands.items():
        out.append((f"{path} {name}", cmd))
        if isinstance(cmd, click.Group):
            out.extend(_commands(cmd, f"{path} {name}"))
    return out


def test_one_flag_name_per_concept_across_commands() -> None:
    """The MetaService address, the warehouse and the brokers are spelled alike everywhere."""
    by_env = {"DTS_META_URL": "--meta-url", "DTS_WAREHOUSE": "--warehouse",
              "DTS_BOOTSTRAP": "--bootstrap"}  # fmt: skip
    by_name = {"url": "--meta-url", "meta_url": "--meta-url", "warehouse": "--warehouse",
               "bootstrap": "--bootstrap"}  # fmt: skip
    seen: dict[str, list[str]] = {flag: [] for flag in by_env.values()}
    for path, cmd in _commands(cli):
        for param in cmd.params:
            if not isinstance(param, click.Option):
                continue
            flag = by_env.get(str(param.envvar)) or by_name.get(param.name or "")
            if flag is not None:
                assert flag in param.opts, f"{path}: {param.opts} ({param.name})"
                seen[flag].append(path)
    assert all(seen.values()), seen
