"""`dts exporter`: serve FileStore metrics of a warehouse on /metrics."""

from __future__ import annotations

import threading

import click


@click.command()
@click.option(
    "--warehouse",
    envvar="DTS_WAREHOUSE",
    required=True,
    help="Warehouse path or URI (env DTS_WAREHOUSE).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind; 0.0.0.0 inside a container.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=9464,
    show_default=True,
    help="Port of /metrics (0 picks a free one).",
)
def exporter(warehouse: str, host: str, port: int) -> None:
    """Export FileStore state (runs, files, bytes, snapshots, barrier age) for Prometheus.

    The warehouse is read on every scrape; nothing is written. Stop with Ctrl-C.
    """
    from prometheus_client import start_http_server

    from bridge.exporter import exporter_registry

    registry = exporter_registry(warehouse)
    server, thread = start_http_server(port, addr=host, registry=registry)
    click.echo(
        f"dts exporter: http://{host}:{server.server_port}/metrics for warehouse {warehouse}",
        err=True,
    )
    try:
        threading.Event().wait()  # the server runs in its own thread until Ctrl-C
    except KeyboardInterrupt:
        click.echo("dts exporter: stopping", err=True)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
