"""Errors raised by the LogStore."""

from __future__ import annotations


class LogStoreError(Exception):
    """Base class of every LogStore error."""


class BrokerStartError(LogStoreError):
    """The embedded broker could not be started or did not answer."""
