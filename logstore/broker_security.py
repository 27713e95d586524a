"""The embedded broker's secured mode: SASL_SSL with SCRAM-SHA-512, TLS, ACLs enforced.

What a production Kafka usually is, on 127.0.0.1, for tests and for users trying dts
against one: clients authenticate with SCRAM-SHA-512 over TLS (certificates made at
start, ``logstore.tls_files``), and the standard KRaft authorizer refuses whatever no ACL
allows. The first user is the admin: the broker's own principal and the only super user;
it grants the others their ACLs (``grant``).

SCRAM credentials are written into the log directory when it is formatted
(``kafka-storage format --add-scram``): the broker authenticates itself to its own
SASL_SSL listener with them, so they must exist before it first starts.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from logstore.errors import BrokerStartError
from logstore.localhost import LOOPBACK, write_private
from logstore.tls_files import TlsFiles

MECHANISM = "SCRAM-SHA-512"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# --add-scram takes ``name=...,password=...`` inside brackets: other characters would need
# quoting rules the storage tool does not document
_SAFE = re.compile(r"^[A-Za-z0-9_.@+-]+$")


def _jaas(module: str, user: str, password: str, extra: str = "") -> str:
    return f'{module} required username="{user}" password="{password}"{extra};'


@dataclass(frozen=True)
class BrokerSecurity:
    """Users (name -> password) of a secured broker; the first is the admin and super user.

    ``tls_dir`` holds the CA and broker certificate (made there when absent); None: the
    broker's own directory. A cluster's nodes share one, so clients trust one CA.
    """

    users: Mapping[str, str]
    tls_dir: Path | None = None

    def __post_init__(self) -> None:
        if not self.users:
            raise BrokerStartError("a secured broker needs at least its admin user")
        for name, password in self.users.items():
            # the password is never shown, only which user's is wrong
            if not _SAFE.match(name) or not _SAFE.match(password):
                raise BrokerStartError(
                    f"user {name!r} of the secured broker: names and passwords may hold only "
                    "letters, digits and _ . @ + -"
                )

    def __repr__(self) -> str:  # dataclass's would print the passwords
        return f"BrokerSecurity(users={sorted(self.users)}, tls_dir={self.tls_dir})"

    @classmethod
    def generated(cls, *names: str, tls_dir: Path | None = None) -> BrokerSecurity:
        """``admin`` and ``names`` with random passwords."""
        return cls({n: secrets.token_urlsafe(18) for n in ("admin", *names)}, tls_dir)

    @classmethod
    def kept_in(cls, directory: Path, *names: str) -> BrokerSecurity:
        """``admin`` and ``names``, their passwords kept in ``directory`` (made the first
        time): a broker restarted on its data keeps the credentials it was formatted with."""
        path = directory / "scram-users.properties"
        users = _read_users(path) if path.is_file() else {}
        missing = [n for n in ("admin", *names) if n not in users]
        if missing and path.is_file():
            raise BrokerStartError(
                f"users {missing} are not in {path}: the broker's log directory was formatted "
                "without them; start on a new --data directory to add users"
            )
        if not users:
            users = dict(cls.generated(*names).users)
            directory.mkdir(parents=True, exist_ok=True)
            write_private(path, "".join(f"{n}={p}\n" for n, p in users.items()))
        return cls(users, directory / "tls")

    @property
    def admin(self) -> str:
        return next(iter(self.users))

    def format_args(self) -> list[str]:
        """The storage tool's arguments that create every user's SCRAM credential.

        The tool takes them only on its command line, so a local user listing processes
        could see them for the two seconds it runs: acceptable for a broker on 127.0.0.1
        for tests and trials, which is all this is."""
        args: list[str] = []
        for name, password in self.users.items():
            args += ["--add-scram", f"{MECHANISM}=[name={name},password={password}]"]
        return args

    def redact(self, text: str) -> str:
        """``text`` (a failed command's output) with every password replaced."""
        for password in self.users.values():
            text = text.replace(password, "***")
        return text

    def server_properties(self, port: int, controller_port: int, tls: TlsFiles) -> dict[str, str]:
        """The broker settings of the secured mode, over ``server_properties``'s."""
        admin, password = self.admin, self.users[self.admin]
        return {
            "listeners": f"SASL_SSL://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller_port}",
            "advertised.listeners": f"SASL_SSL://{LOOPBACK}:{port}",
            "inter.broker.listener.name": "SASL_SSL",
            # The controller listener is SASL_PLAINTEXT with PLAIN, on 127.0.0.1 only. Not
            # SCRAM: a controller keeps SCRAM credentials in the very metadata log it serves,
            # so it cannot check them before it has a quorum (KIP-631). Not plain PLAINTEXT:
            # its ANONYMOUS principal would have to be a super user, and any local process
            # could then alter ACLs through the controller (KIP-919). Not TLS: its traffic
            # never leaves the loopback interface.
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": _jaas(
                "org.apache.kafka.common.security.plain.PlainLoginModule",
                admin,
                password,
                f' user_{admin}="{password}"',
            ),
            f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config": _jaas(
                "org.apache.kafka.common.security.scram.ScramLoginModule", admin, password
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tls.keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(tls.ca),
            "ssl.client.auth": "none",
            "authorizer.class.name": AUTHORIZER,
            "super.users": f"User:{admin}",
            "allow.everyone.if.no.acl.found": "false",
            # topics appear only through a principal allowed to create them
            "auto.create.topics.enable": "false",
        }

    def client_settings(self, tls: TlsFiles, user: str | None = None) -> dict[str, str]:
        """librdkafka settings of ``user`` (default: the admin)."""
        name = user or self.admin
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": name,
            "sasl.password": self.users[name],
            "ssl.ca.location": str(tls.ca),
        }


def _read_users(path: Path) -> dict[str, str]:
    users: dict[str, str] = {}
    for line in path.read_text().splitlines():
        name, sep, password = line.partition("=")
        if sep:
            users[name.strip()] = password.strip()
    return users


def write_client_properties(path: Path, settings: Mapping[str, str]) -> Path:
    """``settings`` as a client properties file (``dts --kafka-config``, ``DTS_KAFKA_CONFIG``),
    readable by its owner only: it holds a password."""
    return write_private(path, "".join(f"{k}={v}\n" for k, v in settings.items()))
