"""`dts broker`: run a single-node Apache Kafka broker (KRaft) on 127.0.0.1."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType

import click

from logstore.broker import EmbeddedBroker
from logstore.errors import BrokerStartError


@click.command()
@click.option(
    "--port",
    type=int,
    default=9092,
    show_default=True,
    help="TCP port on 127.0.0.1 (0 = any free port).",
)
@click.option(
    "--data",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for the broker's log directory, configuration and log file, kept after it "
    "stops (and reused by the next start). Default: a temporary directory removed on stop.",
)
def broker(port: int, data: Path | None) -> None:
    """Start the embedded Apache Kafka broker, print its bootstrap address, stop on Ctrl-C or SIGTERM.

    The broker's jars come from the local cache that `make kafka-jars` fills from Maven Central.
    """
    log_path = data / "broker.log" if data is not None else None
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with EmbeddedBroker(port=port, log_path=log_path, data_dir=data) as b:
            click.echo(f"bootstrap: {b.bootstrap}", nl=True)
            click.echo(
                f"Apache Kafka started in {b.startup_seconds:.1f}s; broker log: {b.log_path}; "
                "Ctrl-C to stop",
                err=True,
            )
            while not stop.wait(0.5):
                if not b.running:
                    raise click.ClickException(f"the broker exited; see its log at {b.log_path}")
        click.echo("broker stopped", err=True)
    except BrokerStartError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
