"""The base of bridge's errors, and the errors of bridge's top modules.

Every part of bridge keeps its errors in its own ``errors.py`` (``bridge.meta.errors``,
``bridge.spark.errors``, ``bridge.worker.errors``, ``bridge.demo.errors``), each under a
base class deriving from :class:`DtsError`. filestore and logstore never import bridge:
their bases are ``filestore.errors.FileStoreError`` and ``logstore.errors.LogStoreError``.

Imports within bridge: nothing.
"""

from __future__ import annotations


class DtsError(Exception):
    """Base class of every error raised by bridge: the dts command prints these as one
    'Error:' line."""


class PrometheusUnavailable(DtsError):
    """No Prometheus binary, or it did not start or answer."""


class ConsistentSnapshotExpired(DtsError):
    """A consistent version names a snapshot that expiration has already removed: the
    version's barrier is older than the table keeps snapshots (``snapshot.time-retained``)
    because another table of the version lags that far behind. Raised from the
    FileStore's ``SnapshotNotFound``."""
