"""Errors raised by the worker."""

from __future__ import annotations


class WorkerError(Exception):
    """Base class of the worker's errors."""


class TableSchemaChanged(WorkerError):
    """The log carries columns the table has gained since this worker opened it: the
    table is reopened from its last snapshot with the new schema (nothing is lost)."""
