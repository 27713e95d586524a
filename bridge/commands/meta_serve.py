"""`dts meta serve`: the MetaService's HTTP API in this process, until Ctrl-C."""

from __future__ import annotations

import ipaddress
import socket
import ssl

import click

from bridge.commands.meta import default_db
from bridge.commands.signals import sigterm_as_interrupt
from bridge.meta.auth import ADMIN_TOKEN_ENV, CA_FILE_ENV, TOKEN_ENV, MetaAuth
from bridge.meta.models import DEFAULT_PRUNE_KEEP


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="0 = any free port.",
)
@click.option("--db", help="SQLAlchemy URL (postgresql://... for a shared deployment).")
@click.option(
    "--warehouse", envvar="DTS_WAREHOUSE", help="Default database: <warehouse>/_meta/meta.db."
)
@click.option(
    "--heartbeat-timeout-ms",
    type=click.IntRange(100),
    default=30_000,
    show_default=True,
    help="A running job silent this long is marked failed.",
)
@click.option(
    "--keep-barriers",
    type=click.IntRange(1),
    default=DEFAULT_PRUNE_KEEP,
    show_default=True,
    help="Barriers kept per table (older ones are pruned; a consistent read needs the "
    "barriers its tables share).",
)
@click.option(
    "--hold-consistent/--no-hold-consistent",
    default=True,
    show_default=True,
    help="Keep, on the tables of --warehouse, the snapshots a strong consistent read may "
    "pin (a consumer each table's expiration respects), however far one table lags.",
)
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    help=f"Bearer token of jobs and tools (env {TOKEN_ENV}).",
)
@click.option(
    "--admin-token",
    envvar=ADMIN_TOKEN_ENV,
    help=f"Bearer token that may also end or delete any job (env {ADMIN_TOKEN_ENV}).",
)
@click.option(
    "--tls-cert",
    type=click.Path(exists=True, dir_okay=False),
    help="PEM certificate (chain) to serve over TLS only, with --tls-key; clients verify "
    f"it with the system trust store or the CA file in {CA_FILE_ENV}.",
)
@click.option(
    "--tls-key",
    type=click.Path(exists=True, dir_okay=False),
    help="PEM private key of --tls-cert (unencrypted; keep it mode 0600).",
)
def serve(
    host: str,
    port: int,
    db: str | None,
    warehouse: str | None,
    heartbeat_timeout_ms: int,
    keep_barriers: int,
    hold_consistent: bool,
    token: str | None,
    admin_token: str | None,
    tls_cert: str | None,
    tls_key: str | None,
) -> None:
    """Run the MetaService HTTP API (OpenAPI at /docs). Stop with Ctrl-C."""
    # one without the other would silently serve plaintext (or fail deep in uvicorn)
    if tls_cert and not tls_key:
        raise click.UsageError("--tls-cert needs --tls-key (the certificate's private key)")
    if tls_key and not tls_cert:
        raise click.UsageError("--tls-key needs --tls-cert (the certificate it belongs to)")
    # the server's stack (uvicorn, FastAPI, SQLAlchemy) only for `dts meta serve`
    import uvicorn

    from bridge.meta.server import create_app
    from bridge.meta.store import Store

    auth = MetaAuth(token or None, admin_token or None)
    if auth.open and not _loopback(host):
        raise click.UsageError(
            f"refusing to serve on {host} without a token: anyone reaching it could end jobs "
            f"and report barriers; set {TOKEN_ENV} and {ADMIN_TOKEN_ENV} (or --token, "
            "--admin-token), or bind 127.0.0.1"
        )
    store = Store(default_db(db, warehouse), heartbeat_timeout_ms=heartbeat_timeout_ms)
    holds = None
    if hold_consistent and warehouse:
        from bridge.meta.holds import ConsistentHolds
        from filestore import Catalog

        holds = ConsistentHolds(Catalog(warehouse))
    app = create_app(store, auth=auth, prune_keep=keep_barriers, holds=holds)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    # listen before saying so: connections wait in the backlog until uvicorn accepts them
    # (a client acting on the line below got "connection refused" under load before)
    sock.listen(2048)
    bound = sock.getsockname()[1]
    # with a certificate uvicorn wraps every connection in TLS: a plaintext request fails
    # its handshake, so the tokens never cross the network in the clear
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", ssl_certfile=tls_cert, ssl_keyfile=tls_key
    )
    try:
        # loaded here, not in run(): a certificate and key that do not match fail before
        # the address line, which scripts take as "ready"
        config.load()
    except (OSError, ssl.SSLError) as e:
        sock.close()
        store.close()
        raise click.ClickException(
            f"cannot serve TLS with --tls-cert {tls_cert} and --tls-key {tls_key}: {e}"
        ) from None
    server = uvicorn.Server(config)
    base = f"{'https' if tls_cert else 'http'}://{host}:{bound}"
    # SIGTERM (docker stop, a supervisor) before uvicorn installs its handlers ended the
    # process silently; as Ctrl-C it stops cleanly with the stop line. uvicorn restores
    # this handler and re-raises the signal it caught, which lands here too.
    try:
        with sigterm_as_interrupt():
            # Ctrl-C before uvicorn installs its handlers lands here too: a clean stop
            _announce(base, store.safe_url, auth, keep_barriers, warehouse if holds else None)
            # uvicorn handles SIGINT/SIGTERM (drains, runs the shutdown) and then
            # re-raises the signal; that is our normal way out.
            server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        store.close()
        click.echo("MetaService stopped")


def _announce(
    base: str, database: str, auth: MetaAuth, keep_barriers: int, holds_in: str | None
) -> None:
    """The first line is what scripts wait for (the address); the rest says where to look."""
    access = "open (no token)" if auth.open else "bearer token"
    click.echo(f"MetaService listening on {base} (database {database}; {access})")
    click.echo(
        f"  API          {base}  (JSON: /health, /jobs, /tables, /consistent-version, /lineage)"
    )
    click.echo(f"  OpenAPI docs {base}/docs  (spec {base}/openapi.json)")
    click.echo(f"  metrics      {base}/metrics  (Prometheus)")
    click.echo(f"  barriers     the newest {keep_barriers:,} of each table kept (--keep-barriers)")
    if holds_in:
        click.echo(f"  holds        consistent versions' snapshots kept in {holds_in}")
    else:
        click.echo("  holds        none (--no-hold-consistent, or no --warehouse)")
    click.echo("Ctrl-C stops it")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False
