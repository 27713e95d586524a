"""A Python client of the MetaService (httpx): one method per API call.

Errors come back as the same :mod:`bridge.meta.errors` classes the service raised
(``CycleError`` with ``.details["path"]``, ``WriterConflict`` with ``.details["job_id"]``...).
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import httpx
from pydantic import TypeAdapter

from bridge.meta.auth import ADMIN_TOKEN_ENV, CA_FILE_ENV, JOB_HEADER, TOKEN_ENV
from bridge.meta.errors import (
    ERRORS_BY_CODE,
    InvalidRequest,
    MetaError,
    MetaTlsError,
    MetaUnavailable,
)
from bridge.meta.job_handle import JobHandle
from bridge.meta.models import (
    BarrierRecord,
    ConsistencyMode,
    ConsistentVersion,
    Health,
    Job,
    JobKind,
    JobSpec,
    JobState,
    Lineage,
    LineageEdge,
    SinkRole,
    TableBarrierReport,
    TableStatus,
    Trace,
)
from bridge.meta.versions import ConsistencyModeName

__all__ = ["JobHandle", "MetaClient"]  # the public API (docs/reference)

log = logging.getLogger(__name__)

DEFAULT_URL = "http://127.0.0.1:8765"
# a dataclass (bridge.meta.versions), validated as the API models are
_CONSISTENT_VERSION = TypeAdapter(ConsistentVersion)


def tls_verify(url: str, ca_file: str | None) -> bool | ssl.SSLContext:
    """What the client verifies the server with: nothing for plain http, the system CA
    bundle for https, or only the CA file given. No bundle is loaded for http: loading it
    costs ~25 ms a client (more on a busy core), and the Spark sink makes clients every
    micro-batch and task; a plain-http client never handshakes TLS (httpx follows no
    redirect unasked)."""
    if url.lower().startswith("http://"):
        return False
    if not ca_file:
        return True
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as e:
        raise MetaTlsError(
            f"cannot load the MetaService CA file {ca_file!r} ({CA_FILE_ENV}, or a Spark "
            f"job's option meta.ca-file): {e}"
        ) from e


def _tls_failure(url: str, ca_file: str | None, e: httpx.HTTPError) -> MetaTlsError | None:
    """The TLS reason a call failed, said so a user knows what to set; None for others."""
    cause: BaseException | None = e
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            trusted = f"the CA file {ca_file}" if ca_file else "the system trust store"
            return MetaTlsError(
                f"the certificate of the MetaService at {url} is not trusted by {trusted} "
                f"({cause.verify_message}); set {CA_FILE_ENV} (a Spark job: option meta.ca-file) "
                "to the CA file that signed it"
            )
        cause = cause.__cause__ or cause.__context__
    if url.lower().startswith("http://") and isinstance(e, httpx.RemoteProtocolError):
        # a TLS listener answers a plaintext request with a failed handshake: the
        # connection closes (or an alert arrives) instead of an HTTP response
        return MetaTlsError(
            f"the MetaService at {url} closed the connection without an HTTP answer; "
            "if it serves TLS (dts meta serve --tls-cert), use an https:// URL"
        )
    return None


class MetaClient:
    """``MetaClient("http://127.0.0.1:8765")``; a context manager closing its connections.

    Every call raises the :mod:`bridge.meta.errors` class the service answered with,
    ``MetaUnavailable`` when it cannot be reached, ``MetaTlsError`` when its certificate
    cannot be verified (saying what to set).

    Args:
        url: the service's address (http:// or https://).
        timeout_s: the timeout of each call, in seconds.
        token: the bearer token to send (default: env ``DTS_META_TOKEN``; ``admin=True``
            prefers ``DTS_META_ADMIN_TOKEN``, for operators' tools).
        admin: prefer the admin token from the environment.
        ca_file: the CA certificate(s) an https service is verified with (default: env
            ``DTS_META_CA_FILE``; without either, the system trust store).

    Example:
        >>> from bridge.meta.client import MetaClient
        >>> with MetaClient("http://127.0.0.1:8765") as meta:
        ...     version = meta.consistent_version(["db.orders", "db.totals"])
        >>> version.barrier
        1764320000000
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        timeout_s: float = 10.0,
        token: str | None = None,
        admin: bool = False,
        ca_file: str | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._ca_file = ca_file or os.environ.get(CA_FILE_ENV) or None
        if token is None:
            token = (os.environ.get(ADMIN_TOKEN_ENV) if admin else None) or os.environ.get(
                TOKEN_ENV
            )
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=self.url,
            timeout=timeout_s,
            headers=headers,
            verify=tls_verify(self.url, self._ca_file),
        )

    def __enter__(self) -> MetaClient:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the client's connections."""
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as e:
            tls = _tls_failure(self.url, self._ca_file, e)
            if tls is not None:
                raise tls from e
            raise MetaUnavailable(f"MetaService at {self.url} unreachable: {e}") from e
        if response.status_code < 400:
            return response.json() if response.content else None
        raise _error(response)

    # ---- service ---------------------------------------------------------------------

    def health(self) -> Health:
        """The service's health.

        Returns:
            Its status, database kind, auth mode and heartbeat timeout.
        """
        return Health.model_validate(self._call("GET", "/health"))

    # ---- jobs ------------------------------------------------------------------------

    def register_job(
        self,
        kind: JobKind | str,
        sources: Sequence[str] = (),
        sinks: Sequence[str] = (),
        *,
        job_id: str | None = None,
        heartbeat_timeout_ms: int | None = None,
        description: str = "",
        role: SinkRole | str = SinkRole.WRITER,
    ) -> Job:
        """Register a job reading ``sources`` and writing ``sinks`` (FLIP-276's lineage).

        Args:
            kind: what runs it (:class:`JobKind`: ``worker``, ``spark``, ...).
            sources: the tables it reads (`db.t`).
            sinks: the tables it writes.
            job_id: its id (None: the service makes one); registering an id again
                re-attaches to it.
            heartbeat_timeout_ms: how long without a heartbeat before it is failed.
            description: free text shown by ``dts meta jobs``.
            role: how it writes ``sinks`` (:class:`SinkRole`; a writer by default).

        Returns:
            The registered job.

        Raises:
            WriterConflict: a sink already has a running writer.
            CycleError: the job would close a cycle in the lineage.
        """
        spec = JobSpec(
            job_id=job_id,
            kind=JobKind(kind),
            sources=list(sources),
            sinks=list(sinks),
            role=SinkRole(role),
            heartbeat_timeout_ms=heartbeat_timeout_ms,
            description=description,
        )
        # the default role is left out, so a writer also registers with a service that
        # predates roles
        body = spec.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
        return Job.model_validate(self._call("POST", "/jobs", json=body))

    def list_jobs(self, state: JobState | str | None = None) -> list[Job]:
        """The registered jobs.

        Args:
            state: only jobs in this state (None: all).

        Returns:
            The jobs.
        """
        params = {"state": JobState(state).value} if state else None
        return [Job.model_validate(j) for j in self._call("GET", "/jobs", params=params)]

    def get_job(self, job_id: str) -> Job:
        """One job.

        Args:
            job_id: its id.

        Returns:
            The job.

        Raises:
            JobNotFound: no job has that id.
        """
        return Job.model_validate(self._call("GET", f"/jobs/{job_id}"))

    def heartbeat(self, job_id: str) -> Job:
        """Heartbeat ``job_id``; only the job itself heartbeats: the call acts as it.

        Args:
            job_id: the job's id.

        Returns:
            The job, its heartbeat renewed.

        Raises:
            JobNotFound: the job was forgotten, or ended elsewhere.
        """
        return Job.model_validate(
            self._call("POST", f"/jobs/{job_id}/heartbeat", headers={JOB_HEADER: job_id})
        )

    def finish_job(
        self,
        job_id: str,
        state: JobState | str = JobState.FINISHED,
        reason: str = "",
        *,
        own: bool = False,
    ) -> Job:
        """End a job.

        Args:
            job_id: the job's id.
            state: ``finished`` or ``failed``.
            reason: why (kept with the job).
            own: the caller is that job (it registered it); otherwise ending it needs the
                admin token.

        Returns:
            The ended job.
        """
        body = {"state": JobState(state).value, "reason": reason}
        headers = {JOB_HEADER: job_id} if own else None
        return Job.model_validate(
            self._call("POST", f"/jobs/{job_id}/finish", json=body, headers=headers)
        )

    def forget_job(self, job_id: str, *, own: bool = False) -> None:
        """Remove a job from the service, with its lineage edges.

        Args:
            job_id: the job's id.
            own: the caller is that job; otherwise it needs the admin token.
        """
        self._call("DELETE", f"/jobs/{job_id}", headers={JOB_HEADER: job_id} if own else None)

    @contextmanager
    def running_job(
        self,
        kind: JobKind | str,
        sources: Sequence[str] = (),
        sinks: Sequence[str] = (),
        *,
        job_id: str | None = None,
        heartbeat_timeout_ms: int | None = None,
        heartbeat_interval_s: float | None = None,
        role: SinkRole | str = SinkRole.WRITER,
    ) -> Iterator[JobHandle]:
        """Register, heartbeat in the background, and finish (or fail, on an exception).

        Args:
            kind: what runs it (see `register_job`).
            sources: the tables it reads.
            sinks: the tables it writes.
            job_id: its id (None: the service makes one).
            heartbeat_timeout_ms: how long without a heartbeat before it is failed.
            heartbeat_interval_s: seconds between heartbeats (None: a third of the timeout).
            role: how it writes ``sinks``.

        Yields:
            The running job's handle.
        """
        job = self.register_job(
            kind,
            sources,
            sinks,
            job_id=job_id,
            heartbeat_timeout_ms=heartbeat_timeout_ms,
            role=role,
        )
        handle = JobHandle(self, job, heartbeat_interval_s)
        try:
            yield handle
        except BaseException as e:
            handle.stop()
            reason = f"{type(e).__name__}: {e}"[:1000]
            self.finish_job(job.job_id, JobState.FAILED, reason, own=True)
            raise
        handle.stop()
        self.finish_job(job.job_id, JobState.FINISHED, own=True)

    # ---- tables and barriers -----------------------------------------------------------

    def report_barrier(
        self,
        table: str,
        barrier: int,
        snapshot_id: int | None = None,
        *,
        job_id: str | None = None,
        completed_at_ms: int | None = None,
    ) -> BarrierRecord:
        """The committer reports that ``table`` completed ``barrier`` as ``snapshot_id``.

        Args:
            table: the table (`db.t`).
            barrier: the barrier its snapshot carries.
            snapshot_id: the snapshot committed for it.
            job_id: the reporting job (a job's own reports need no admin token).
            completed_at_ms: when it completed (None: now, on the service's clock).

        Returns:
            The barrier as recorded.
        """
        body = {"barrier": barrier, "snapshot_id": snapshot_id, "job_id": job_id}
        if completed_at_ms is not None:
            body["completed_at_ms"] = completed_at_ms
        body = {k: v for k, v in body.items() if v is not None}
        return BarrierRecord.model_validate(
            self._call("POST", f"/tables/{table}/barriers", json=body)
        )

    def report_barriers(self, reports: Sequence[TableBarrierReport], chunk: int = 5000) -> int:
        """Report many completed barriers (a catch-up, `dts meta sync`), in chunks.

        Args:
            reports: the barriers completed, each with its table and snapshot.
            chunk: reports per request.

        Returns:
            How many the service recorded.
        """
        count = 0
        for i in range(0, len(reports), chunk):
            body = [r.model_dump(mode="json", exclude_none=True) for r in reports[i : i + chunk]]
            count += self._call("POST", "/barriers", json=body)["count"]
        return count

    def tables(self) -> list[TableStatus]:
        """Every table the service knows, with its last completed barrier.

        Returns:
            The tables' status.
        """
        return [TableStatus.model_validate(t) for t in self._call("GET", "/tables")]

    def table(self, table: str) -> TableStatus:
        """One table's status.

        Args:
            table: the table (`db.t`).

        Returns:
            Its latest barrier and snapshot, its writers and upstream tables.
        """
        return TableStatus.model_validate(self._call("GET", f"/tables/{table}"))

    def barriers(
        self, table: str, limit: int = 100, before: int | None = None
    ) -> list[BarrierRecord]:
        """A table's completed barriers, newest first.

        Args:
            table: the table (`db.t`).
            limit: at most this many.
            before: only barriers below this one (paging).

        Returns:
            The barriers.
        """
        params: dict[str, int] = {"limit": limit}
        if before is not None:
            params["before"] = before
        rows = self._call("GET", f"/tables/{table}/barriers", params=params)
        return [BarrierRecord.model_validate(r) for r in rows]

    # ---- consistency and lineage ---------------------------------------------------------

    def consistent_version(
        self,
        tables: Sequence[str],
        mode: ConsistencyMode | ConsistencyModeName = ConsistencyMode.STRONG,
    ) -> ConsistentVersion:
        """The version at which ``tables`` can be read together (FLIP-276).

        Args:
            tables: table names (`db.t`).
            mode: ``strong`` (one barrier every table, and every table between them in
                the lineage, has completed) or ``weak`` (each table's latest).

        Returns:
            The barrier and each table's snapshot.

        Raises:
            NoConsistentVersion: a strong read is not possible yet; it names the table
                that holds it back.
        """
        params = {"tables": list(tables), "mode": ConsistencyMode(mode).value}
        return _CONSISTENT_VERSION.validate_python(
            self._call("GET", "/consistent-version", params=params)
        )

    def lineage(self, table: str) -> Lineage:
        """The tables upstream and downstream of ``table``.

        Args:
            table: the table (`db.t`).

        Returns:
            Its lineage, through the registered jobs.
        """
        return Lineage.model_validate(self._call("GET", f"/lineage/{table}"))

    def graph(self) -> tuple[list[LineageEdge], str]:
        """The whole lineage graph.

        Returns:
            Its edges, and the graph as a Mermaid diagram.
        """
        body = self._call("GET", "/lineage")
        return [LineageEdge.model_validate(e) for e in body["edges"]], body["mermaid"]

    def trace(self, table: str) -> Trace:
        """Where the lag of ``table`` starts, along its lineage.

        Args:
            table: the table (`db.t`).

        Returns:
            Its lag and the most upstream table that lags as much.
        """
        return Trace.model_validate(self._call("GET", f"/trace/{table}"))


def _error(response: httpx.Response) -> MetaError:
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = response.text
    if isinstance(detail, dict) and "error" in detail:
        cls = ERRORS_BY_CODE.get(detail["error"], MetaError)
        extra = {k: v for k, v in detail.items() if k not in ("error", "message")}
        return cls(str(detail.get("message", "")), **extra)
    if response.status_code >= 500:
        return MetaUnavailable(f"MetaService error {response.status_code}: {detail}")
    return InvalidRequest(f"MetaService refused the request ({response.status_code}): {detail}")
