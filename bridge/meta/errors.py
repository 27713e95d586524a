"""Errors of the MetaService, shared by the store, the HTTP API and the client.

Each error carries a stable ``code`` (sent over HTTP) and the HTTP status the API
answers with, so the client can raise the same class the store raised.
"""

from __future__ import annotations

from typing import Any, ClassVar

from bridge.errors import DtsError


class MetaError(DtsError):
    """Base class of MetaService errors."""

    code: ClassVar[str] = "meta_error"
    status: ClassVar[int] = 400

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.details}


class InvalidRequest(MetaError):
    """The request is well-formed JSON but makes no sense (e.g. a job with no tables)."""

    code = "invalid_request"
    status = 400


class JobNotFound(MetaError):
    code = "job_not_found"
    status = 404


class TableNotRegistered(MetaError):
    """The table has never been registered nor reported a barrier."""

    code = "table_not_found"
    status = 404


class JobAlreadyExists(MetaError):
    code = "job_exists"
    status = 409


class CycleError(MetaError):
    """Registering the job would close a cycle in the table graph; ``path`` names it."""

    code = "cycle"
    status = 409


class WriterConflict(MetaError):
    """The table already has a running writer; ``job_id`` names it."""

    code = "writer_conflict"
    status = 409


class JobNotRunning(MetaError):
    """Heartbeat or report from a job that was finished, failed or cancelled."""

    code = "job_not_running"
    status = 409


class NoConsistentVersion(MetaError):
    """The tables share no completed barrier (yet)."""

    code = "no_consistent_version"
    status = 409


class Unauthorized(MetaError):
    """No bearer token, or one this service does not accept."""

    code = "unauthorized"
    status = 401


class Forbidden(MetaError):
    """The caller is authenticated but may not do this (another job's business)."""

    code = "forbidden"
    status = 403


class MetaUnavailable(MetaError):
    """The service could not be reached or answered with a server error."""

    code = "unavailable"
    status = 503


class MetaTlsError(MetaUnavailable):
    """No TLS session with the service: its certificate is not trusted (a CA file is
    missing or wrong), or a plain http:// client reached a service that serves TLS."""

    code = "tls"
    status = 503


ERRORS_BY_CODE: dict[str, type[MetaError]] = {
    cls.code: cls
    for cls in (
        MetaError,
        InvalidRequest,
        JobNotFound,
        TableNotRegistered,
        JobAlreadyExists,
        CycleError,
        WriterConflict,
        JobNotRunning,
        NoConsistentVersion,
        Unauthorized,
        Forbidden,
        MetaUnavailable,
        MetaTlsError,
    )
}
