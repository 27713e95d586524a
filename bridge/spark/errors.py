"""Errors raised by the Spark integration (`dts` data source, sink, CTAS)."""

from __future__ import annotations


class SparkBridgeError(Exception):
    """Base class of every error raised by `bridge.spark`."""


class OptionError(SparkBridgeError, ValueError):
    """An option given to the `dts` source or sink is missing, unknown or malformed."""


class StagingError(SparkBridgeError):
    """A staged (CTAS) table could not be begun, committed or aborted."""


class BarrierError(SparkBridgeError):
    """The barrier a streaming sink should commit could not be determined."""


class JobRefused(SparkBridgeError):
    """The MetaService refused to register the write (a second writer of a table, a cycle)."""


class SchemaConflict(SparkBridgeError):
    """A `mergeSchema` write's new schema version could not be published with its data (the
    table's schema changed while the write ran)."""


class LogTruncated(SparkBridgeError):
    """The log holds a truncate a log-tier read cannot turn into rows."""
