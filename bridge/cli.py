"""The ``dts`` command line: one group per part, each defined in ``bridge.commands``.

User errors (a missing table, a bad schema, an unreachable broker, a refused
MetaService call) end as one ``Error:`` line saying what to do, never a traceback;
``DTS_DEBUG=1`` shows the traceback as well.

Imports within bridge: bridge.commands, bridge.errors.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import click

from bridge.commands import (
    broker,
    connect,
    demo,
    exporter,
    ingest,
    meta,
    meta_serve,
    table,
    table_tags,
    worker,
)
from bridge.errors import DtsError
from filestore.errors import FileStoreError
from logstore.client_config import CONFIG_ENV, client_settings
from logstore.errors import ClientConfigError, LogStoreError

#: the project's own errors: every bridge error derives from DtsError; filestore and
#: logstore (which never import bridge) have their own bases
_USER_ERRORS = (DtsError, FileStoreError, LogStoreError)


class DtsGroup(click.Group):
    """Turns the project's own errors into one ``Error:`` line, and shows in every
    command's help which environment variable fills an option."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except _USER_ERRORS as exc:
            if os.environ.get("DTS_DEBUG"):
                raise
            raise click.ClickException(str(exc)) from exc


def _show_envvars(cmd: click.Command) -> None:
    for param in cmd.params:
        if isinstance(param, click.Option) and param.envvar:
            param.show_envvar = True
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            _show_envvars(sub)


@click.group(cls=DtsGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dynamic-table-storage", prog_name="dts")
@click.option(
    "--kafka-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar=CONFIG_ENV,
    default=None,
    help="Kafka client settings (librdkafka names: security.protocol, sasl.mechanism, "
    "sasl.username, sasl.password, ssl.ca.location, ...) for every Kafka client of the command "
    f"and of the processes it starts. Also ${CONFIG_ENV}; DTS_KAFKA_<PROPERTY> variables add to it.",
)
def cli(kafka_config: Path | None) -> None:
    """Dynamic table storage: a Kafka LogStore plus a columnar LSM FileStore.

    $DTS_LOG_LEVEL (debug, info, warning, error; default warning) sets how much every
    command logs; DTS_DEBUG=1 shows the traceback behind an Error line.
    """
    _setup_logging()
    if kafka_config is not None:
        # the environment carries it to every client and to the worker/Spark processes
        os.environ[CONFIG_ENV] = str(kafka_config.resolve())
        try:
            client_settings()
        except ClientConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="--kafka-config") from exc


LOG_LEVEL_ENV = "DTS_LOG_LEVEL"
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _setup_logging() -> None:
    """Plain log lines on stderr at $DTS_LOG_LEVEL (compose sets it for every service)."""
    level = os.environ.get(LOG_LEVEL_ENV, "warning").strip().upper()
    if level not in _LEVELS:
        raise click.UsageError(
            f"{LOG_LEVEL_ENV}={os.environ[LOG_LEVEL_ENV]!r} is not a log level; "
            f"use one of {', '.join(lv.lower() for lv in _LEVELS)}"
        )
    logging.basicConfig(level=level, format=worker.PLAIN_LOG_FORMAT)


table.table.add_command(table_tags.tag)
meta.meta.add_command(meta_serve.serve)
cli.add_command(table.table)
cli.add_command(broker.broker)
cli.add_command(connect.connect)
cli.add_command(ingest.ingest)
cli.add_command(worker.worker)
cli.add_command(meta.meta)
cli.add_command(exporter.exporter)
cli.add_command(demo.demo)
_show_envvars(cli)
