"""Create, describe and delete a table's topic (partitions = buckets)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined, unused-ignore]  # not in __all__
    AdminClient,
    ConfigResource,
    NewTopic,
)

from logstore.acls import refusal
from logstore.client_config import CLIENT_LOGGER, client_settings, confluent_config
from logstore.errors import (
    BrokerAuthenticationError,
    BrokerUnreachableError,
    TopicError,
    TopicMismatchError,
)
from logstore.spec import LogSpec

TIMEOUT_S = 15.0


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


class _Credentials:
    """Remembers a broker's refusal of the client's credentials: librdkafka reports it only
    to the error callback, and a metadata request then fails as a plain transport error."""

    def __init__(self) -> None:
        self.refused: KafkaError | None = None

    def __call__(self, err: KafkaError) -> None:
        if err.code() == KafkaError._AUTHENTICATION:
            self.refused = err

    def check(self, bootstrap: str, admin: AdminClient) -> None:
        admin.poll(0)  # serves the error callback
        if self.refused is None:
            return
        user = client_settings().get("sasl.username")
        who = f"user {user!r}" if user else "this client"
        raise BrokerAuthenticationError(
            f"Kafka at {bootstrap} refused the credentials of {who} ({self.refused.str()}): "
            "check sasl.username, sasl.password and sasl.mechanism in the client settings "
            "(--kafka-config / DTS_KAFKA_CONFIG, DTS_KAFKA_SASL_PASSWORD)"
        )


# the client lines of a probe that fails: its caller raises one error saying it all
_PROBE_LOG = logging.getLogger(f"{CLIENT_LOGGER}.probe")
_PROBE_LOG.propagate = False
_PROBE_LOG.addHandler(logging.NullHandler())


def admin_client(bootstrap: str, credentials: _Credentials | None = None) -> AdminClient:
    overrides: dict[str, object] = {}
    if credentials is not None:
        # polled for the error callback, a client serves its queued log lines too
        overrides = {"error_cb": credentials, "logger": _PROBE_LOG}
    return AdminClient(confluent_config(bootstrap, {"log_level": 3}, overrides))


def ensure_reachable(bootstrap: str, timeout_s: float = 5.0) -> None:
    """Fail fast, with what to do, when no broker answers at ``bootstrap``.

    A long-running command (the worker) otherwise retries its connections forever or
    fails each table separately with a raw client error.
    """
    credentials = _Credentials()
    admin = admin_client(bootstrap, credentials)
    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        credentials.check(bootstrap, admin)
        err = exc.args[0]
        reason = err.str() if isinstance(err, KafkaError) else str(err)
        raise BrokerUnreachableError(
            f"no Kafka broker answered at {bootstrap} within {timeout_s:g}s ({reason}); "
            "start one with `dts broker`, or pass --bootstrap (or DTS_BOOTSTRAP) and, for a "
            "secured cluster, --kafka-config"
        ) from exc


def _all_topics(admin: AdminClient, bootstrap: str, credentials: _Credentials) -> Any:
    """The cluster's metadata, asked for in one-second tries: refused credentials end the
    wait after the first one instead of after the whole timeout."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            # all topics, not list_topics(topic=...): asking for one topic by name makes
            # brokers with auto-creation (Kafka defaults) create it
            return admin.list_topics(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
        except KafkaException:
            credentials.check(bootstrap, admin)
            if time.monotonic() >= deadline:
                raise


def topic_config(spec: LogSpec) -> dict[str, str]:
    config = {"cleanup.policy": "delete"}
    if spec.retention_ms is not None:
        config["retention.ms"] = str(spec.retention_ms)
    if spec.min_insync_replicas is not None:
        config["min.insync.replicas"] = str(spec.min_insync_replicas)
    return config


def describe_topic(bootstrap: str, topic: str, with_config: bool = True) -> TopicInfo | None:
    """Partition count (and configs) of ``topic``, or None when it does not exist."""
    credentials = _Credentials()
    admin = admin_client(bootstrap, credentials)
    try:
        md = _all_topics(admin, bootstrap, credentials)
    except KafkaException as exc:
        raise TopicError(f"cannot describe topic {topic!r} on {bootstrap}: {exc}") from exc
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None or not tmd.partitions:
        return None
    config: dict[str, str] = {}
    if with_config:
        try:
            fut = admin.describe_configs([ConfigResource("topic", topic)])
            for res in fut.values():
                config = {k: v.value for k, v in res.result(timeout=TIMEOUT_S).items()}
        except KafkaException:  # not every broker answers DescribeConfigs; configs are advisory
            config = {}
    return TopicInfo(topic, len(tmd.partitions), config)


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    config: dict[str, str],
    replication_factor: int | None = None,
) -> bool:
    """Create ``topic`` (``replication_factor`` None: the cluster's default); returns False
    when it already existed."""
    admin = admin_client(bootstrap)
    new = NewTopic(
        topic,
        num_partitions=partitions,
        replication_factor=-1 if replication_factor is None else replication_factor,
        config=config,
    )
    futures = admin.create_topics(
        [new],
        operation_timeout=TIMEOUT_S,
    )
    try:
        futures[topic].result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        create = f"CREATE on Topic {topic!r}"
        refused = refusal(
            exc, f"cannot create topic {topic!r}", {"Topic": create, "Cluster": create}
        )
        if refused is not None:
            raise refused from exc
        hint = ""
        if exc.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR and replication_factor:
            hint = (
                f" (replication factor {replication_factor}: the cluster has fewer brokers; "
                "lower the table option log.replication-factor)"
            )
        raise TopicError(f"cannot create topic {topic!r} on {bootstrap}: {exc}{hint}") from exc
    return True


def ensure_topic(bootstrap: str, spec: LogSpec) -> TopicInfo:
    """Create the table's topic if absent; refuse an existing one with another partition count."""
    info = describe_topic(bootstrap, spec.topic, with_config=False)
    if info is None:
        create_topic(
            bootstrap, spec.topic, spec.buckets, topic_config(spec), spec.replication_factor
        )
        info = _wait_for_topic(bootstrap, spec.topic)
    if info.partitions != spec.buckets:
        raise TopicMismatchError(
            f"topic {spec.topic!r} has {info.partitions} partitions but the table has "
            f"{spec.buckets} buckets; partition = bucket, so they must match. Use another "
            "log.topic, or delete the topic if its data is not needed"
        )
    return info


def ensure_dlq_topic(bootstrap: str, spec: LogSpec) -> None:
    if describe_topic(bootstrap, spec.dlq_topic, with_config=False) is None:
        config = {"cleanup.policy": "delete"}
        if spec.min_insync_replicas is not None:
            config["min.insync.replicas"] = str(spec.min_insync_replicas)
        create_topic(bootstrap, spec.dlq_topic, 1, config, spec.replication_factor)
        _wait_for_topic(bootstrap, spec.dlq_topic)


def delete_topic(bootstrap: str, topic: str) -> bool:
    """Delete ``topic``; returns False when it did not exist."""
    admin = admin_client(bootstrap)
    futures = admin.delete_topics([topic], operation_timeout=TIMEOUT_S)
    try:
        futures[topic].result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return False
        raise TopicError(f"cannot delete topic {topic!r} on {bootstrap}: {exc}") from exc
    return True


def _wait_for_topic(bootstrap: str, topic: str) -> TopicInfo:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        info = describe_topic(bootstrap, topic, with_config=False)
        if info is not None:
            return info
        time.sleep(0.05)
    raise TopicError(f"topic {topic!r} was created but is not visible after {TIMEOUT_S:.0f}s")
