"""Kafka ACLs: granting a principal what a component needs, and naming what it lacked.

``grant`` is the admin's side (tests, ``dts broker --secure`` users); ``refusal`` turns a
broker's authorization error into a ``NotAuthorizedError`` that says which ACL is missing,
so a component started with too few rights stops with one line a Kafka admin can act on.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined, unused-ignore]  # not in __all__
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from logstore.client_config import client_settings
from logstore.errors import NotAuthorizedError
from logstore.kafka_failures import is_transient

TIMEOUT_S = 15.0
log = logging.getLogger(__name__)
E = TypeVar("E", bound=NotAuthorizedError)

#: the broker's authorization errors and the resource type each one is about
_REFUSED = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "Topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "Group",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TransactionalId",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "Cluster",
}
_RESOURCE_TYPES = {
    "Topic": ResourceType.TOPIC,
    "Group": ResourceType.GROUP,
    "TransactionalId": ResourceType.TRANSACTIONAL_ID,
    "Cluster": ResourceType.BROKER,  # librdkafka's name for the cluster resource
}


@dataclass(frozen=True)
class Acl:
    """One ALLOW rule: ``operation`` on a resource (``name``; a prefix when ``prefixed``)."""

    resource: str  # Topic, Group, TransactionalId or Cluster
    name: str
    operation: str  # READ, WRITE, CREATE, DESCRIBE, IDEMPOTENT_WRITE, ...
    prefixed: bool = False

    def __str__(self) -> str:
        if self.resource == "Cluster":
            return f"{self.operation} on the Cluster"
        kind = "names starting with " if self.prefixed else ""
        return f"{self.operation} on {self.resource} {kind}{self.name!r}"


def _binding(principal: str, acl: Acl) -> Any:
    return AclBinding(
        _RESOURCE_TYPES[acl.resource],
        "kafka-cluster" if acl.resource == "Cluster" else acl.name,
        ResourcePatternType.PREFIXED if acl.prefixed else ResourcePatternType.LITERAL,
        principal,
        "*",
        AclOperation[acl.operation],
        AclPermissionType.ALLOW,
    )


def grant(admin: AdminClient, user: str, acls: Iterable[Acl]) -> None:
    """Allow ``User:<user>`` each of ``acls`` (``admin``: a client of a super user)."""
    bindings = [_binding(f"User:{user}", a) for a in acls]
    for future in admin.create_acls(bindings, request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)


def refusal(
    exc: KafkaException | KafkaError,
    doing: str,
    needs: Mapping[str, str],
    cls: type[E] = NotAuthorizedError,  # type: ignore[assignment]
) -> E | None:
    """A ``NotAuthorizedError`` when ``exc`` is the broker refusing an operation, else None.

    ``needs`` maps a resource type (``Topic``, ``TransactionalId``, ...) to the ACLs the
    operation needs on it, as a sentence part (``"WRITE on Topic 'orders'"``).
    """
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else exc
    if not isinstance(err, KafkaError) or err.code() not in _REFUSED:
        return None
    kind = _REFUSED[err.code()]
    user = client_settings().get("sasl.username")
    who = f"User:{user}" if user else "this client's principal"
    missing = needs.get(kind, f"an ACL on the {kind}")
    return cls(
        f"{doing}: Kafka refused {who}, which lacks {missing} (ask the cluster's admin for "
        f"that ACL; the broker said: {err.str()})"
    )


def missing_acls(
    admin: AdminClient,
    topics: Mapping[str, Iterable[str]],
    group: tuple[str, Iterable[str]] | None = None,
) -> list[Acl]:
    """The ACLs of ``topics`` (name -> operations) and ``group`` (id, operations) that the
    admin client's principal lacks, from the operations the broker says it may perform.

    Empty when the broker has no authorizer, or for a topic that does not exist yet (its
    creator's rights are checked when it is created).
    """
    from confluent_kafka import TopicCollection

    missing: list[Acl] = []
    if topics:
        futures = admin.describe_topics(
            TopicCollection(list(topics)),
            include_authorized_operations=True,
            request_timeout=TIMEOUT_S,
        )
        for name, future in futures.items():
            wanted = list(topics[name])
            try:
                allowed = future.result(timeout=TIMEOUT_S).authorized_operations
            except KafkaException as exc:
                code = exc.args[0].code()
                if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:  # not even DESCRIBE
                    missing += [Acl("Topic", name, op) for op in wanted]
                    continue
                if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                raise
            if allowed is None:  # the broker authorizes nothing: no ACLs to lack
                return []
            missing += _lacking("Topic", name, wanted, allowed)
    if group is not None:
        group_id, wanted = group[0], list(group[1])
        (future,) = admin.describe_consumer_groups(
            [group_id], include_authorized_operations=True, request_timeout=TIMEOUT_S
        ).values()
        try:
            allowed = future.result(timeout=TIMEOUT_S).authorized_operations
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.GROUP_AUTHORIZATION_FAILED:
                # e.g. the coordinator still loading: the group client waits and retries
                # by itself; this check cannot tell, so it does not stop the start
                return missing
            allowed = []  # not even DESCRIBE
        missing += _lacking("Group", group_id, wanted, allowed)
    return missing


def _lacking(resource: str, name: str, wanted: list[str], allowed: Any) -> list[Acl]:
    if allowed is None:  # the broker authorizes nothing: no ACLs to lack
        return []
    have = {op.name for op in allowed}
    return [Acl(resource, name, op) for op in wanted if op not in have and "ALL" not in have]


def require_acls(
    bootstrap: str,
    who: str,
    topics: Mapping[str, Iterable[str]],
    group: tuple[str, Iterable[str]] | None = None,
) -> None:
    """Raise one ``NotAuthorizedError`` naming every ACL ``who`` (a component) lacks."""
    from logstore.client_config import confluent_config

    admin = AdminClient(confluent_config(bootstrap, {"log_level": 3}))
    try:
        missing = missing_acls(admin, topics, group)
    except (concurrent.futures.TimeoutError, KafkaException) as exc:
        if isinstance(exc, KafkaException) and not is_transient(exc):
            raise
        # a check, not the work: a cluster too busy to answer it in time (a secured
        # cluster under load, in a CI run) must not stop the start; a lacking ACL still
        # shows, as the client's own authorization error, once the work begins
        log.warning(
            "%s: Kafka did not answer the ACL check within %.0f s (%s); starting without it",
            who,
            TIMEOUT_S,
            str(exc) or type(exc).__name__,  # a future's TimeoutError has no message
        )
        return
    if missing:
        user = client_settings().get("sasl.username")
        principal = f"User:{user}" if user else "its principal"
        raise NotAuthorizedError(
            f"{who} cannot start: Kafka does not allow {principal} "
            f"{'; '.join(str(a) for a in missing)} (ask the cluster's admin for these ACLs)"
        )
