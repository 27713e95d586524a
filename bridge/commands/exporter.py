"""`dts exporter`: serve FileStore metrics of a warehouse on /metrics."""

from __future__ import annotations

import signal
import socket

import click

from bridge.commands.signals import sigterm_as_interrupt


def _wait_for_a_signal() -> None:
    """Sleep until SIGINT or SIGTERM; their handlers raise KeyboardInterrupt.

    Waiting on a lock (``threading.Event().wait()``) ignored Ctrl-C: the kernel hands a
    process signal to any thread that does not block it (the HTTP server's, pyarrow's,
    polars'), so the main thread's wait was never interrupted and the Python handler
    never ran. The wakeup fd gets a byte whichever thread the signal hit.
    """
    wake_r, wake_w = socket.socketpair()
    wake_w.setblocking(False)
    previous = signal.set_wakeup_fd(wake_w.fileno())
    try:
        while True:
            wake_r.recv(64)  # returns on any signal; the handler raises on ours
    finally:
        signal.set_wakeup_fd(previous)
        wake_r.close()
        wake_w.close()


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
    # prometheus_client (and bridge.exporter) only for `dts exporter`, not `dts --help`
    from prometheus_client import start_http_server

    from bridge.exporter import exporter_registry

    registry = exporter_registry(warehouse)
    server, thread = start_http_server(port, addr=host, registry=registry)
    click.echo(
        f"dts exporter: http://{host}:{server.server_port}/metrics for warehouse {warehouse}",
        err=True,
    )
    try:
        with sigterm_as_interrupt():
            _wait_for_a_signal()  # the server runs in its own thread until Ctrl-C
    except KeyboardInterrupt:
        click.echo("dts exporter: stopping", err=True)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        click.echo("dts exporter stopped", err=True)
