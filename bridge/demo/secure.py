"""`dts demo --secure`: the demo's broker on SASL_SSL with ACLs, its MetaService over TLS.

The broker is the embedded one in its secured mode, as `dts broker --secure` and the
tests start it (``logstore.broker_security``: SCRAM-SHA-512, the standard authorizer; TLS
certificates made at start by ``logstore.tls_files``). The MetaService serves TLS with
the certificate of that same CA (it names 127.0.0.1), and needs a bearer token.

The admin, the broker's only super user, does one thing: grant the demo's principal
``dts`` the ACLs its parts need (``demo_acls``). Every part then connects the way a user
configures dts against a secured deployment, through the documented client
configuration only: ``DTS_KAFKA_CONFIG`` (``dts``'s client properties file),
``DTS_META_CA_FILE`` and ``DTS_META_TOKEN``, set in the demo's environment so the CDC
generator's log writers, the worker, the MetaService, the Spark JVM and its Python
workers all take them from there. The secrets live in mode-0600 files under the run's
``secure/`` directory and are never printed.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bridge.meta.auth import CA_FILE_ENV, TOKEN_ENV
from logstore.acls import Acl, grant
from logstore.broker import EmbeddedBroker
from logstore.broker_security import BrokerSecurity, write_client_properties
from logstore.client_config import CONFIG_ENV
from logstore.localhost import write_private
from logstore.spec import LogSpec
from logstore.writer import default_transactional_id

#: the principal every part of the demo connects as (the admin only grants its ACLs)
USER = "dts"
#: how the demo says its broker is secured
SECURED = "secured: a SASL_SSL listener (SCRAM-SHA-512), TLS certificates made now, ACLs enforced"


def demo_acls(specs: Iterable[LogSpec], group: str) -> list[Acl]:
    """What the demo's parts need, and nothing more: the CDC generator writes each source
    table's log under its transactional id; the worker creates the topics, then reads them
    in ``group``. Spark reads the FileStore tier only: no Kafka ACL."""
    acls: list[Acl] = []
    for spec in specs:
        acls += [Acl("Topic", spec.topic, op) for op in ("CREATE", "DESCRIBE", "WRITE", "READ")]
        tid = default_transactional_id(spec)
        acls += [Acl("TransactionalId", tid, op) for op in ("DESCRIBE", "WRITE")]
    return [*acls, Acl("Group", group, "READ")]


@dataclass(frozen=True)
class Secured:
    """What the secured demo's parts are started with, and what it prints about it."""

    #: the documented client configuration (DTS_KAFKA_CONFIG, DTS_META_CA_FILE,
    #: DTS_META_TOKEN); out of the repr: it holds the token
    environment: dict[str, str] = field(repr=False)
    #: the CA file the broker's and the MetaService's certificates are verified with
    ca: Path
    #: `dts meta serve`'s TLS options
    meta_tls_args: list[str]
    #: where the files are, for the "Running now" table (paths, never a secret)
    addresses: dict[str, str]
    #: the progress line saying how every part connects
    message: str
    #: a shell line giving another terminal the same settings (the token read from its file)
    exports: str


@dataclass(frozen=True)
class DemoSecurity:
    """The secured demo's credentials and files, all under ``directory``."""

    directory: Path
    broker_security: BrokerSecurity
    #: the MetaService's bearer token; out of the repr, like the passwords
    token: str = field(repr=False)

    @classmethod
    def generated(cls, directory: Path) -> DemoSecurity:
        """Random passwords and token; ``directory`` made (new, its owner's only), the
        certificates go to ``directory``/tls when the broker starts."""
        directory.mkdir(mode=0o700)
        security = BrokerSecurity.generated(USER, tls_dir=directory / "tls")
        return cls(directory, security, secrets.token_urlsafe(24))

    @property
    def client_properties(self) -> Path:
        """``dts``'s Kafka client properties file (``DTS_KAFKA_CONFIG``)."""
        return self.directory / f"client-{USER}.properties"

    @property
    def token_file(self) -> Path:
        """Where the token is kept for a user exploring a kept-running demo."""
        return self.directory / "meta-token"

    def start_broker(self, log_path: Path) -> EmbeddedBroker:
        """The embedded broker in its secured mode (certificates made now); ``dts``'s
        client properties file written beside them."""
        broker = EmbeddedBroker(log_path=log_path, security=self.broker_security).start()
        write_client_properties(self.client_properties, broker.client_settings(USER))
        write_private(self.token_file, self.token + "\n")
        return broker

    def secure(self, broker: EmbeddedBroker, specs: Iterable[LogSpec], group: str) -> Secured:
        """The admin (the super user) grants ``dts`` the demo's ACLs; what the parts get."""
        # the admin's settings stay in this process: no file holds them
        from confluent_kafka.admin import AdminClient

        assert broker.tls is not None, "a secured broker has its certificates once started"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **broker.client_settings()})
        grant(admin, USER, demo_acls(specs, group))
        ca, props, token_file = broker.tls.ca, self.client_properties, self.token_file
        # the broker's keystore holds its key and chain in one PEM file: it serves as both
        # of the MetaService's options (the certificate names 127.0.0.1, the same CA)
        keystore = str(broker.tls.keystore)
        return Secured(
            environment={CONFIG_ENV: str(props), CA_FILE_ENV: str(ca), TOKEN_ENV: self.token},
            ca=ca,
            meta_tls_args=["--tls-cert", keystore, "--tls-key", keystore],
            addresses={
                f"Kafka client properties (User:{USER})": str(props),
                "CA file (Kafka, MetaService)": str(ca),
                "MetaService token": f"in {token_file} (not shown)",
            },
            message=(
                f"User:{USER} granted only the ACLs the generator and the worker need; every "
                f"part connects as it through {CONFIG_ENV}={props}, {CA_FILE_ENV}={ca} and "
                f"{TOKEN_ENV} (its value is in {token_file}, never printed)"
            ),
            exports=(
                f'export {CONFIG_ENV}={props} {CA_FILE_ENV}={ca} {TOKEN_ENV}="$(cat {token_file})"'
            ),
        )


@contextmanager
def environment_set(values: dict[str, str]) -> Iterator[None]:
    """``values`` in this process's environment (inherited by every process it starts)
    until the context ends; the previous values are restored."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
