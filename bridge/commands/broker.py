"""`dts broker`: run Apache Kafka (KRaft) on 127.0.0.1: one node, or a cluster (`--nodes 3`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import click

from bridge.commands.signals import stop_on_signal
from logstore.broker import EmbeddedBroker
from logstore.broker_security import BrokerSecurity, write_client_properties
from logstore.cluster import KafkaCluster
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
@click.option(
    "--nodes",
    type=click.IntRange(1, 9),
    default=1,
    show_default=True,
    help="Nodes (each a broker and a controller). Above 1: a cluster with every topic "
    "replicated on every node and min.insync.replicas a majority; --port is then ignored "
    "(free ports are picked) and --data holds one directory per node.",
)
@click.option(
    "--secure",
    is_flag=True,
    help="SASL_SSL with SCRAM-SHA-512, TLS certificates made at start and ACLs enforced (the "
    "standard authorizer): prints the CA file and the admin's client properties file "
    "(for --kafka-config); the admin is the only super user and grants the others ACLs.",
)
@click.option(
    "--user",
    "users",
    multiple=True,
    metavar="NAME",
    help="With --secure: one more SCRAM user (repeatable), with a generated password, no ACLs "
    "and its own client properties file.",
)
def broker(port: int, data: Path | None, nodes: int, secure: bool, users: tuple[str, ...]) -> None:
    """Start the embedded Apache Kafka broker (or cluster), print its bootstrap address, stop
    on Ctrl-C or SIGTERM.

    The broker's jars come from the local cache that `make kafka-jars` fills from Maven Central.
    """
    if users and not secure:
        raise click.UsageError("--user needs --secure")
    try:
        with stop_on_signal() as stop:
            security = secured_users(data, users) if secure else None
            if nodes > 1:
                _serve_cluster(nodes, data, stop, security)
            else:
                _serve_one(port, data, stop, security)
        click.echo("broker stopped", err=True)
    except BrokerStartError as exc:
        raise click.ClickException(str(exc)) from exc


def secured_users(data: Path | None, users: tuple[str, ...]) -> BrokerSecurity:
    """The admin and ``users``: kept in ``data`` (a restart on it needs the same ones)."""
    if data is None:
        return BrokerSecurity.generated(*users)
    return BrokerSecurity.kept_in(data, *users)


def _echo_security(
    security: BrokerSecurity, settings: Callable[[str | None], dict[str, str]], where: Path
) -> None:
    """Where clients find the CA and their settings; never the passwords themselves."""
    admin = settings(None)
    click.echo(f"ca: {admin['ssl.ca.location']}")
    path = write_client_properties(where / "client.properties", admin)
    click.echo(f"client properties: {path}")
    for user in list(security.users)[1:]:
        path = write_client_properties(where / f"client-{user}.properties", settings(user))
        click.echo(f"client properties ({user}): {path}")


def _serve_one(
    port: int, data: Path | None, stop: threading.Event, security: BrokerSecurity | None
) -> None:
    log_path = data / "broker.log" if data is not None else None
    with EmbeddedBroker(port=port, log_path=log_path, data_dir=data, security=security) as b:
        click.echo(f"bootstrap: {b.bootstrap}", nl=True)
        if security is not None and b.client_properties is not None:
            _echo_security(security, b.client_settings, b.client_properties.parent)
        click.echo(
            f"Apache Kafka started in {b.startup_seconds:.1f}s; broker log: {b.log_path}; "
            "Ctrl-C to stop",
            err=True,
        )
        while not stop.wait(0.5):
            if not b.running:
                raise click.ClickException(f"the broker exited; see its log at {b.log_path}")


def _serve_cluster(
    nodes: int, data: Path | None, stop: threading.Event, security: BrokerSecurity | None
) -> None:
    with KafkaCluster(nodes, data_dir=data, security=security) as c:
        click.echo(f"bootstrap: {c.bootstrap}", nl=True)
        if security is not None and c.root is not None:
            _echo_security(security, c.client_settings, c.root)
        logs = ", ".join(f"node {i}: {p}" for i, p in c.log_paths().items())
        click.echo(
            f"Apache Kafka cluster of {nodes} nodes started in {c.startup_seconds:.1f}s; "
            f"logs: {logs}; Ctrl-C to stop",
            err=True,
        )
        while not stop.wait(0.5):
            down = sorted(set(c.brokers) - set(c.running()))
            if down:
                raise click.ClickException(f"node(s) {down} exited; see their logs: {logs}")
