"""The ``dts`` command line: one group per part, each defined in ``bridge.commands``."""

from __future__ import annotations

import click

from bridge.commands import broker, demo, exporter, ingest, meta, table, worker


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dynamic-table-storage", prog_name="dts")
def cli() -> None:
    """Dynamic table storage: a Kafka LogStore plus a columnar LSM FileStore."""


cli.add_command(table.table)
cli.add_command(broker.broker)
cli.add_command(ingest.ingest)
cli.add_command(worker.worker)
cli.add_command(meta.meta)
cli.add_command(exporter.exporter)
cli.add_command(demo.demo)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
