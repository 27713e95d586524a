"""Errors raised by the worker."""

from __future__ import annotations

from bridge.errors import DtsError


class WorkerError(DtsError):
    """Base class of the worker's errors."""


class TableSchemaChanged(WorkerError):
    """The log carries columns the table has gained since this worker opened it: the
    table is reopened from its last snapshot with the new schema (nothing is lost)."""


class NoTablesError(WorkerError):
    """The worker was started with nothing to consume."""


class FetchError(WorkerError):
    """The fetch consumer failed in a way it cannot retry (bad configuration, auth)."""


class PreparedRecordError(WorkerError):
    """A prepared record on disk cannot be read (corrupt or from another version)."""
