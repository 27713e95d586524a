"""Helpers of the tests against a secured broker or cluster: each principal's ACLs and
client properties file."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

from logstore.acls import Acl
from logstore.broker_security import write_client_properties
from tests.bridge.worker.support import WorkerProc, start_worker


def writer_acls(topic: str, transactional_id: str) -> list[Acl]:
    """What the LogWriter needs for one table: its topic, its transactional id."""
    return [
        *(Acl("Topic", topic, op) for op in ("CREATE", "DESCRIBE", "WRITE", "READ")),
        *(Acl("TransactionalId", transactional_id, op) for op in ("DESCRIBE", "WRITE")),
    ]


def worker_acls(topic: str, group: str) -> list[Acl]:
    """What `dts worker` needs for one table: read its topic, in its consumer group."""
    return [
        *(Acl("Topic", topic, op) for op in ("DESCRIBE", "READ")),
        Acl("Group", group, "READ"),
    ]


def dead_letter_acls(topic: str) -> list[Acl]:
    """What `dts worker` needs on top to dead-letter a table's bad records: make and write
    ``<topic>.dlq`` (its producer is idempotent)."""
    return [Acl("Topic", f"{topic}.dlq", op) for op in ("CREATE", "DESCRIBE", "WRITE")]


def client_properties(
    settings: Callable[[str], dict[str, str]], user: str, where: Path, **changes: str
) -> Path:
    """``user``'s settings (``settings``: the broker's or cluster's ``client_settings``) as a
    properties file, with ``changes`` over them."""
    path = where / f"{user}-{uuid.uuid4().hex[:6]}.properties"
    return write_client_properties(path, {**settings(user), **changes})


def start_secured_worker(
    settings: Callable[[str], dict[str, str]],
    warehouse: Path | str,
    bootstrap: str,
    tables: list[str],
    group: str,
    where: Path,
) -> WorkerProc:
    """`dts worker` as the principal "worker", its client settings in a properties file."""
    config = client_properties(settings, "worker", where)
    env = {"DTS_KAFKA_CONFIG": str(config)}
    return start_worker(warehouse, bootstrap, tables, group, where, env=env)


def ingest_acls(source: str, topic: str) -> list[Acl]:
    """What `dts ingest` needs to copy ``source`` into a table's log ``topic``: read the
    source in its group (offsets committed with the log), and write the log transactionally
    under its ingest id (``dts-ingest-<topic>`` names both)."""
    own = f"dts-ingest-{topic}"
    return [
        *(Acl("Topic", source, op) for op in ("DESCRIBE", "READ")),
        Acl("Group", own, "READ"),
        *writer_acls(topic, own),
    ]
