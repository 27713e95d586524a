"""Kafka client settings (SASL, SSL, any client property) for every client the project makes.

One set of settings, written with librdkafka's property names (the names
confluent-kafka takes), reaches every client: the LogWriter's producer, the
LogReader's and the barrier scan's consumers, the DLQ producer, the topics
admin, `dts ingest`, the Spark `dts` source's consumers, Spark's own Kafka
source (translated to Java client names) and the Faust worker (translated to
aiokafka's arguments).

Where the settings come from, later ones winning:

1. the properties file named by ``$DTS_KAFKA_CONFIG`` (``key=value`` lines, ``#``
   comments), which ``dts --kafka-config FILE ...`` sets for the command and every
   process it starts;
2. environment variables ``DTS_KAFKA_<PROPERTY>``, the property upper-cased with
   ``.`` as ``_`` (``DTS_KAFKA_SASL_PASSWORD=...`` sets ``sasl.password``);
3. settings a caller passes in code (``producer_config``, ``consumer_config``, ...).

Example (a SASL_SSL cluster with SCRAM)::

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-512
    sasl.username=dts
    sasl.password=secret
    ssl.ca.location=/etc/kafka/ca.pem
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from logstore.errors import ClientConfigError

CONFIG_ENV = "DTS_KAFKA_CONFIG"
ENV_PREFIX = "DTS_KAFKA_"
#: ``DTS_KAFKA_*`` variables that are not client properties
_NOT_PROPERTIES = {CONFIG_ENV, "DTS_KAFKA_JARS"}


def _read_properties(path: Path) -> dict[str, str]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ClientConfigError(f"cannot read Kafka client settings from {path}: {exc}") from exc
    out: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if sep < 0:
            # the line is not quoted: a malformed one is often a password's ("sasl.password
            # hunter2", Java's space-separated form)
            raise ClientConfigError(
                f"{path}:{n}: expected key=value (or key: value); the line is not shown, as it "
                "may hold a secret"
            )
        out[line[:sep].strip()] = line[sep + 1 :].strip()
    return out


def client_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings from ``$DTS_KAFKA_CONFIG`` and ``DTS_KAFKA_*`` (librdkafka names)."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    path = env.get(CONFIG_ENV)
    if path:
        out.update(_read_properties(Path(path)))
    for name, value in env.items():
        if name.startswith(ENV_PREFIX) and name not in _NOT_PROPERTIES:
            out[name[len(ENV_PREFIX) :].lower().replace("_", ".")] = value
    return out


#: where librdkafka's own log lines go (instead of its raw ``%3|...|FAIL|...`` lines on stderr)
CLIENT_LOGGER = "logstore.kafka"
# the parts of a librdkafka line that change between repeats of one condition: counters,
# durations, ports of retries ("after 0ms in state CONNECT, 5 identical error(s) suppressed")
_VARYING = re.compile(r"\([^)]*\)|\d+")
_THREAD = re.compile(r"^\[thrd:[^\]]*\]:\s*")  # librdkafka's internal thread name


#: conditions remembered at most (a long-lived process makes clients now and then)
_MAX_SEEN = 4096


class _OncePerCondition(logging.Filter):
    """Lets each distinct librdkafka condition through once per client.

    librdkafka logs a failed connection on every retry (a worker pointed at a dead broker
    printed 288 lines before its error). One line per condition and client says what is
    wrong; the error the caller raises says what to do. Per client, not per process: a
    client made later (a new outage, another command in the same process) says it again.
    """

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        # confluent-kafka logs ("%s [%s] %s", facility, client name, message)
        fac, client, msg = (
            (str(args[0]), str(args[1]), str(args[2]))
            if len(args) == 3
            else ("", "", record.getMessage())
        )
        msg = _THREAD.sub("", msg)
        key = client + fac + _VARYING.sub("", msg)
        with self._lock:
            if key in self._seen:
                return False
            if len(self._seen) >= _MAX_SEEN:
                self._seen.clear()
            self._seen.add(key)
        record.msg, record.args = "Kafka client: %s (%s; repeats not shown)", (msg, fac)
        return True


def client_logger() -> logging.Logger:
    """The logger every confluent-kafka client of the project logs through."""
    logger = logging.getLogger(CLIENT_LOGGER)
    if not any(isinstance(f, _OncePerCondition) for f in logger.filters):
        logger.addFilter(_OncePerCondition())
    return logger


def confluent_config(
    bootstrap: str,
    defaults: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A confluent-kafka client config: our defaults, then the settings, then ``overrides``.

    A producer's or admin client's librdkafka log lines go to the ``logstore.kafka``
    Python logger, each distinct condition once (pass ``{"logger": ...}`` in
    ``overrides`` to get them all).
    """
    config = {
        "bootstrap.servers": bootstrap,
        **(defaults or {}),
        **client_settings(),
        **(overrides or {}),
    }
    # Producers and admin clients only: a consumer with a Python logger had its first
    # committed() fail with NOT_COORDINATOR instead of waiting for the coordinator
    # (librdkafka then serves its log queue through the consumer's queue). Commands
    # check the broker first (topics.ensure_reachable), so a dead broker is one error
    # before any consumer exists.
    if "group.id" not in config:
        config.setdefault("logger", client_logger())
    return config


def _mechanism(settings: Mapping[str, str]) -> str | None:
    return settings.get("sasl.mechanism") or settings.get("sasl.mechanisms")


def _quoted(s: str) -> str:
    """A JAAS string value: backslashes and double quotes escaped."""
    return s.replace("\\", "\\\\").replace('"', '\\"')


def _jaas(mechanism: str, username: str, password: str) -> str:
    module = {
        "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
        "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
        "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    }.get(mechanism.upper())
    if module is None:
        raise ClientConfigError(
            f"sasl.mechanism {mechanism!r} with sasl.username/sasl.password: only PLAIN and "
            "SCRAM-SHA-256/512 translate to a Java JAAS config; set sasl.jaas.config yourself"
        )
    return f'{module} required username="{_quoted(username)}" password="{_quoted(password)}";'


#: librdkafka-only names and how they become Java client properties
_LIBRDKAFKA_ONLY = {
    "sasl.username",
    "sasl.password",
    "sasl.mechanisms",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "log_level",
    "enable.ssl.certificate.verification",
}


def java_client_properties(settings: Mapping[str, str]) -> dict[str, str]:
    """The settings with Java Kafka client names (Spark's own Kafka source, Kafka's tools)."""
    out = {k: v for k, v in settings.items() if k not in _LIBRDKAFKA_ONLY}
    mech = _mechanism(settings)
    if mech:
        out["sasl.mechanism"] = mech
    if "sasl.username" in settings and "sasl.jaas.config" not in settings:
        out["sasl.jaas.config"] = _jaas(
            mech or "PLAIN", settings["sasl.username"], settings.get("sasl.password", "")
        )
    if "ssl.ca.location" in settings:
        out.setdefault("ssl.truststore.type", "PEM")
        out.setdefault("ssl.truststore.location", settings["ssl.ca.location"])
    if "ssl.certificate.location" in settings and "ssl.key.location" in settings:
        if settings.get("ssl.key.password"):
            out.setdefault("ssl.key.password", settings["ssl.key.password"])
        out.setdefault("ssl.keystore.type", "PEM")
        out.setdefault(
            "ssl.keystore.certificate.chain", Path(settings["ssl.certificate.location"]).read_text()
        )
        out.setdefault("ssl.keystore.key", Path(settings["ssl.key.location"]).read_text())
    if settings.get("enable.ssl.certificate.verification", "true").lower() == "false":
        out.setdefault("ssl.endpoint.identification.algorithm", "")
    return out


#: a JAAS line's username and password (PLAIN and SCRAM login modules)
_JAAS_VALUE = re.compile(r'\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
#: Java client names librdkafka shares (the rest need a translation or have none)
_JAVA_ONLY = ("ssl.keystore.", "ssl.truststore.", "sasl.jaas.config", "sasl.login.")
#: the Java-only names from_java_properties translates
_TRANSLATED = ("sasl.jaas.config", "ssl.truststore.location", "ssl.truststore.type")


def from_java_properties(props: Mapping[str, str]) -> dict[str, str]:
    """Java Kafka client properties (as Spark's Kafka source takes them) as librdkafka's.

    ``sasl.jaas.config`` of the PLAIN or SCRAM login module becomes ``sasl.username`` and
    ``sasl.password``; a PEM truststore becomes ``ssl.ca.location``; names both clients
    share pass as they are. Raises ClientConfigError naming a property that has no
    librdkafka equivalent (a JKS store: give the PEM file as ``ssl.ca.location``). The
    error never quotes a value: a JAAS line holds a password.
    """
    out = {k: v for k, v in props.items() if not k.startswith(_JAVA_ONLY)}
    jaas = props.get("sasl.jaas.config")
    if jaas is not None:
        found = {m[1]: re.sub(r"\\(.)", r"\1", m[2]) for m in _JAAS_VALUE.finditer(jaas)}
        if "LoginModule" not in jaas or set(found) != {"username", "password"}:
            raise ClientConfigError(
                "sasl.jaas.config: only a PLAIN or SCRAM login module with a quoted username "
                "and password translates; give sasl.username and sasl.password instead"
            )
        out["sasl.username"], out["sasl.password"] = found["username"], found["password"]
    store = props.get("ssl.truststore.location")
    if store is not None:
        if props.get("ssl.truststore.type", "JKS").upper() != "PEM":
            raise ClientConfigError(
                "ssl.truststore.location: librdkafka reads PEM certificates only; give the "
                "CA's PEM file as ssl.ca.location (or ssl.truststore.type=PEM)"
            )
        out["ssl.ca.location"] = store
    left = sorted(k for k in props if k.startswith(_JAVA_ONLY) and k not in _TRANSLATED)
    if left:
        raise ClientConfigError(
            f"{', '.join(left)}: no librdkafka equivalent; give PEM files as "
            "ssl.ca.location, ssl.certificate.location and ssl.key.location"
        )
    return out


def spark_kafka_options(settings: Mapping[str, str] | None = None) -> dict[str, str]:
    """Options of Spark's Kafka source/sink: the Java properties prefixed with ``kafka.``.

    Without ``settings``, the ones from ``$DTS_KAFKA_CONFIG`` and ``DTS_KAFKA_*``.
    """
    given = client_settings() if settings is None else settings
    return {f"kafka.{k}": v for k, v in java_client_properties(given).items()}


def _ssl_context(settings: Mapping[str, str]) -> Any:
    ctx = ssl.create_default_context(cafile=settings.get("ssl.ca.location"))
    if "ssl.certificate.location" in settings:
        ctx.load_cert_chain(
            settings["ssl.certificate.location"],
            settings.get("ssl.key.location"),
            settings.get("ssl.key.password"),
        )
    if settings.get("enable.ssl.certificate.verification", "true").lower() == "false":
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif settings.get("ssl.endpoint.identification.algorithm", "https") == "none":
        ctx.check_hostname = False
    return ctx


def aiokafka_settings(settings: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Keyword arguments of aiokafka's clients (the Faust worker's transport).

    ``security_protocol``, ``sasl_mechanism``, ``sasl_plain_username``,
    ``sasl_plain_password`` and an ``ssl_context`` for SSL/SASL_SSL. Settings aiokafka
    has no equivalent for are refused, so none is silently ignored.
    """
    given = client_settings() if settings is None else dict(settings)
    protocol = given.get("security.protocol", "PLAINTEXT").upper()
    out: dict[str, Any] = {"security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        out["ssl_context"] = _ssl_context(given)
    if protocol.startswith("SASL"):
        out["sasl_mechanism"] = (_mechanism(given) or "PLAIN").upper()
        out["sasl_plain_username"] = given.get("sasl.username")
        out["sasl_plain_password"] = given.get("sasl.password")
    understood = {
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "enable.ssl.certificate.verification",
        "ssl.endpoint.identification.algorithm",
        "client.id",
        "log_level",
    }
    if "client.id" in given:
        out["client_id"] = given["client.id"]
    unknown = sorted(set(given) - understood)
    if unknown:
        raise ClientConfigError(
            f"Kafka client settings {unknown} have no aiokafka equivalent (the worker's Faust "
            "transport); remove them or set them for the confluent-kafka clients only in code"
        )
    return out


def faust_settings(settings: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Settings of a ``faust.App`` for the same cluster: ``broker_credentials`` (or none).

    Pass them to ``faust.App(..., **faust_settings())``; with PLAINTEXT it is empty.
    """
    # Faust is the worker's: the LogStore must not load it for its other clients
    import faust

    kw = aiokafka_settings(settings)
    protocol = kw["security_protocol"]
    if protocol == "PLAINTEXT":
        return {}
    if protocol == "SSL":
        return {"broker_credentials": faust.SSLCredentials(kw["ssl_context"])}
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        return {
            "broker_credentials": faust.SASLCredentials(
                username=kw["sasl_plain_username"],
                password=kw["sasl_plain_password"],
                mechanism=kw["sasl_mechanism"],
                ssl_context=kw.get("ssl_context"),
            )
        }
    raise ClientConfigError(f"security.protocol {protocol!r} is not one Kafka knows")
