"""Errors raised by the Spark integration (`dts` data source, sink, CTAS)."""

from __future__ import annotations

from bridge.errors import DtsError


class SparkBridgeError(DtsError):
    """Base class of every error raised by `bridge.spark`."""


class OptionError(SparkBridgeError, ValueError):
    """An option given to the `dts` source or sink is missing, unknown or malformed."""


class CtasError(SparkBridgeError):
    """A staged (CTAS) table could not be begun, committed or aborted."""


class SinkBarrierError(SparkBridgeError):
    """The barrier a streaming sink should commit could not be determined."""


class JobRefused(SparkBridgeError):
    """The MetaService refused to register the write (a second writer of a table, a cycle)."""


class SchemaConflict(SparkBridgeError):
    """A `mergeSchema` write's new schema version could not be published with its data (the
    table's schema changed while the write ran)."""


class LogTruncated(SparkBridgeError):
    """The log holds a truncate a log-tier read cannot turn into rows."""


class SnapshotsExpired(SparkBridgeError):
    """A file-tier stream's next snapshot expired before the stream read it."""


class ExtensionJarMissing(SparkBridgeError, FileNotFoundError):
    """The dts Spark extension jar was not built."""


class KafkaConnectorMissing(SparkBridgeError):
    """Spark's Kafka connector jars are not in the local cache."""


class KafkaRowsError(SparkBridgeError, ValueError):
    """The DataFrame is not what Spark's Kafka source returns, or cannot be changelogged."""


class OffsetFormatError(SparkBridgeError, ValueError):
    """A checkpointed offset is not a `dts` offset of the expected tier."""
