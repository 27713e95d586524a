"""Errors raised by the LogStore."""

from __future__ import annotations

from typing import Any


class LogStoreError(Exception):
    """Base class of every LogStore error."""


class BrokerStartError(LogStoreError):
    """The embedded broker could not be started or did not answer."""


class PortError(LogStoreError):
    """No free port for a server dts starts, or a bad ``DTS_PORTS`` range."""


class LogSpecError(LogStoreError, ValueError):
    """A table's log settings are invalid or contradict each other."""


class TopicError(LogStoreError):
    """A topic could not be created, described or deleted."""


class BrokerUnreachableError(LogStoreError):
    """No Kafka broker answered at the bootstrap address (down, wrong address, or refused)."""


class TopicMismatchError(TopicError):
    """An existing topic does not fit the table (e.g. partition count != buckets)."""


class EncodeError(LogStoreError, ValueError):
    """Rows cannot be encoded as debezium-json (wrong columns, NaN, unknown row kind)."""


class DecodeError(LogStoreError):
    """A log record is malformed; carries where it is and why."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.reason = reason
        super().__init__(f"bad record at {topic}[{partition}]@{offset}: {reason}")


class BadSourceRecord(DecodeError):
    """An ingest stopped at a source record it cannot decode (everything before it was
    committed, and the source offset stops at it)."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        super().__init__(topic, partition, offset, reason)
        self.args = (
            f"bad record at {topic}[{partition}]@{offset}: {reason}. Everything before it is "
            "committed and the source offset stops at it: rerun with --lenient to send it to "
            f"{topic}.dlq and go on, or fix the source and rerun",
        )


class SourceSchemaChanged(DecodeError):
    """A record carries columns the table does not have (the source's schema changed).

    ``index`` is the record's position in the batch decoded, ``fields`` the new columns
    (name -> Arrow type, from the record's schema or its values).
    """

    def __init__(
        self, topic: str, partition: int, offset: int, index: int, fields: dict[str, Any]
    ) -> None:
        self.index = index
        self.fields = fields
        listed = ", ".join(f"{n} ({t})" for n, t in fields.items())
        super().__init__(
            topic,
            partition,
            offset,
            f"it carries columns the table does not have: {listed}. Add them to the table "
            "(`dts ingest --evolve-schema` adds them as nullable columns; or Table.add_column) "
            "and rerun; they are never dropped silently",
        )


class WriterError(LogStoreError):
    """The log writer failed; the open barrier was aborted and is not visible."""


class WriterFencedError(WriterError):
    """Another writer with the same transactional id took over this table's log."""


class WriterRestartError(WriterError):
    """The open barrier was aborted by a Kafka failure a new writer recovers from: a new
    writer with the same transactional id fences this one and resumes at the last barrier,
    so making one and going on loses and duplicates nothing (what `dts ingest` does)."""


class WriterStuckError(WriterRestartError):
    """The Kafka client is unusable: it did not return from a transactional call in time,
    or hit a fatal error."""


class WriterTransientError(WriterRestartError):
    """A broker's death or a leader's move failed the barrier (a delivery or coordinator
    timeout, no leader yet): the cluster recovers by itself, the writer does not."""


class BarrierError(LogStoreError, ValueError):
    """A barrier id is not strictly greater than the last one, or is otherwise invalid."""


class BarrierNotFoundError(LogStoreError):
    """A reader asked to start from a barrier whose marker is not (or no longer) in the log."""


class OffsetsExpiredError(LogStoreError):
    """Requested offsets are older than the log's retention; restart from a FileStore snapshot."""

    def __init__(
        self,
        topic: str,
        partition: int,
        requested: int,
        earliest: int,
        remedy: str = "read the FileStore snapshot first, then the log from its offsets",
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.requested = requested
        self.earliest = earliest
        super().__init__(
            f"{topic}[{partition}]: offset {requested} has expired past log.retention "
            f"(earliest kept is {earliest}); {remedy}"
        )


class LogScanError(LogStoreError):
    """A range of a topic could not be read: a broker error, or not within the time allowed."""


class ClientConfigError(LogStoreError, ValueError):
    """The Kafka client settings cannot be read or translated for a client."""


class WireValueError(LogStoreError, ValueError):
    """A value's JSON form does not fit its column type."""


class ConnectStartError(LogStoreError):
    """The local Kafka Connect worker could not be started or its connector did not run."""


class BrokerAuthenticationError(BrokerUnreachableError):
    """A broker answered but refused the client's credentials (SASL authentication failed)."""


class NotAuthorizedError(LogStoreError):
    """The broker refused an operation: the client's principal lacks an ACL (named in the
    message)."""


class WriterNotAuthorizedError(WriterError, NotAuthorizedError):
    """The log writer's principal lacks an ACL its writes need (named in the message)."""
