"""The MetaService HTTP API (FastAPI): ``create_app(store)``; OpenAPI at ``/openapi.json``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import sqlalchemy as sa
from fastapi import Body, Depends, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from bridge.meta.auth import JOB_HEADER, Caller, MetaAuth
from bridge.meta.errors import MetaError
from bridge.meta.graph import render_mermaid
from bridge.meta.metrics import RequestMetrics, meta_registry, requests_counter
from bridge.meta.models import (
    DEFAULT_PRUNE_KEEP,
    JOB_ID_PATTERN,
    MAX_INT64,
    TABLE_PATTERN,
    BarrierRecord,
    BarrierReport,
    ConsistencyMode,
    ConsistentVersion,
    Health,
    Job,
    JobEnd,
    JobSpec,
    JobState,
    Lineage,
    LineageEdge,
    TableBarrierReport,
    TableName,
    TableStatus,
    Trace,
    normalize_table_name,
)
from bridge.meta.store import Store

if TYPE_CHECKING:  # filestore (pyarrow) is loaded only by a service that keeps holds
    from bridge.meta.holds import ConsistentHolds

log = logging.getLogger(__name__)

MAX_BATCH = 10_000


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")
    error: str
    message: str


class ErrorBody(BaseModel):
    detail: ErrorDetail | list[Any] | str


class ReportCount(BaseModel):
    count: int


class Graph(BaseModel):
    edges: list[LineageEdge]
    mermaid: str


_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "invalid request"},
    401: {"model": ErrorBody, "description": "no valid bearer token"},
    403: {"model": ErrorBody, "description": "another job's business: needs that job or admin"},
    404: {"model": ErrorBody, "description": "job or table not found"},
    409: {"model": ErrorBody, "description": "refused: cycle, second writer, job state"},
    503: {"model": ErrorBody, "description": "database unavailable"},
}


def _table(
    table: Annotated[str, Path(min_length=1, max_length=255, pattern=TABLE_PATTERN)],
) -> str:
    return normalize_table_name(table)


def _job_id(
    job_id: Annotated[str, Path(min_length=1, max_length=128, pattern=JOB_ID_PATTERN)],
) -> str:
    return job_id


def _caller(
    request: Request,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
    job: Annotated[
        str | None, Header(alias=JOB_HEADER, max_length=128, pattern=JOB_ID_PATTERN)
    ] = None,
) -> Caller:
    auth: MetaAuth = request.app.state.auth
    return auth.caller(authorization, job)


Table = Annotated[str, Depends(_table)]
As = Annotated[Caller, Depends(_caller)]
JobIdP = Annotated[str, Depends(_job_id)]


def create_app(
    store: Store,
    *,
    sweep_interval_s: float | None = None,
    prune_keep: int = DEFAULT_PRUNE_KEEP,
    prune_interval_s: float = 60.0,
    registry: CollectorRegistry | None = None,
    auth: MetaAuth | None = None,
    holds: ConsistentHolds | None = None,
) -> FastAPI:
    """The API over ``store``. A background task marks jobs failed whose heartbeat timed
    out (every ``sweep_interval_s``, default a quarter of the heartbeat timeout) and keeps
    the newest ``prune_keep`` barriers per table (pruned every ``prune_interval_s``), then
    moves the tables' ``holds`` (:mod:`bridge.meta.holds`; None: none kept). Prometheus
    metrics on ``/metrics`` come from ``registry`` (default: a fresh one with the store's
    collector, see :mod:`bridge.meta.metrics`); the app counts its requests in it too.
    ``auth``: the bearer tokens it accepts (:mod:`bridge.meta.auth`; default: none, an
    open service)."""
    interval = sweep_interval_s or max(0.05, min(store.heartbeat_timeout_ms / 4000, 5.0))
    housekeeping = Housekeeping(store, interval, prune_keep, prune_interval_s, holds)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(housekeeping.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app = FastAPI(
        title="dts MetaService",
        version="1.0",
        description="Jobs, lineage, barrier progress and consistent versions across tables "
        "(FLIP-276).",
        lifespan=lifespan,
        responses=_ERRORS,
    )
    app.state.store = store
    app.state.auth = auth or MetaAuth()
    app.state.registry = registry = registry or meta_registry(store)
    app.add_middleware(RequestMetrics, requests=requests_counter(registry))

    @app.exception_handler(MetaError)
    async def _meta_error(_req: Request, exc: MetaError) -> JSONResponse:
        return JSONResponse(status_code=exc.status, content={"detail": exc.to_dict()})

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own handler echoes the input, and json.dumps fails on the NaN or
        # Infinity a client sent (a 500): say where and what, never echo the value
        detail = [
            {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": e.get("type")}
            for e in exc.errors()
        ]
        return JSONResponse(status_code=422, content={"detail": detail})

    @app.exception_handler(sa.exc.OperationalError)
    async def _db_error(_req: Request, exc: sa.exc.OperationalError) -> JSONResponse:
        log.warning("database error: %s", exc)
        body = {"error": "unavailable", "message": f"database unavailable: {exc.orig}"}
        return JSONResponse(status_code=503, content={"detail": body})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(req: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Starlette's 405 names only the first route's methods; name every method the path has.
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            allowed: set[str] = set()
            for route in app.router.routes:
                match, _ = route.matches(req.scope)
                if match is not Match.NONE and isinstance(route, APIRoute):
                    allowed |= route.methods or set()
            headers["Allow"] = ", ".join(sorted(allowed))
        body = {"error": f"http_{exc.status_code}", "message": str(exc.detail)}
        return JSONResponse(status_code=exc.status_code, content={"detail": body}, headers=headers)

    _routes(app, store, app.state.auth)

    # Not in the OpenAPI description: it is Prometheus' text format, not the JSON API.
    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app


@dataclass
class Housekeeping:
    """Sweep every ``interval``; prune, then move the holds, at start and then every
    ``prune_interval_s`` (a time, not a count of sweeps, whose pace follows the heartbeat
    timeout). A hold trails its point by up to that interval: an older point keeps more,
    never less."""

    store: Store
    interval: float
    prune_keep: int
    prune_interval_s: float
    holds: ConsistentHolds | None = None

    async def run(self) -> None:
        next_prune = 0.0
        while True:
            try:
                failed = await asyncio.to_thread(self.store.sweep)
                if failed:
                    log.warning("heartbeat timeout, marked failed: %s", ", ".join(failed))
                if time.monotonic() >= next_prune:
                    await asyncio.to_thread(self.periodic)
                    next_prune = time.monotonic() + self.prune_interval_s
            except Exception:  # keep sweeping through transient database errors
                log.exception("MetaService housekeeping failed; retrying")
            await asyncio.sleep(self.interval)

    def periodic(self) -> None:
        self.store.prune_barriers(self.prune_keep)
        if self.holds is not None:
            self.holds.apply(self.store.consistent_points())


def _routes(app: FastAPI, store: Store, auth: MetaAuth) -> None:
    @app.get("/health", response_model=Health, tags=["service"])
    def health() -> Health:
        """Liveness; no token needed, so it names no secret (no database URL)."""
        return Health(
            database=store.database_kind,
            auth="open" if auth.open else "bearer",
            heartbeat_timeout_ms=store.heartbeat_timeout_ms,
        )

    @app.post("/jobs", response_model=Job, status_code=201, tags=["jobs"])
    def register_job(spec: JobSpec, _who: As) -> Job:
        """Register a job (or re-attach to a running one with the same id, role and tables).
        Refused (409) when it would make a cycle, a second writer or flusher of a table, or a
        FileStore-tier writer beside a flusher; 400 for a flusher with sources."""
        return store.register_job(spec)

    @app.get("/jobs", response_model=list[Job], tags=["jobs"])
    def list_jobs(_who: As, state: JobState | None = None) -> list[Job]:
        return store.list_jobs(state)

    @app.get("/jobs/{job_id}", response_model=Job, tags=["jobs"])
    def get_job(job_id: JobIdP, _who: As) -> Job:
        return store.get_job(job_id)

    @app.post("/jobs/{job_id}/heartbeat", response_model=Job, tags=["jobs"])
    def heartbeat(job_id: JobIdP, who: As) -> Job:
        who.may_manage(job_id, "heartbeat")
        return store.heartbeat(job_id)

    @app.post("/jobs/{job_id}/finish", response_model=Job, tags=["jobs"])
    def finish(job_id: JobIdP, end: Annotated[JobEnd, Body()], who: As) -> Job:
        """End a job (finished, failed, cancelled): frees its tables; its lineage stays.
        The job itself (header X-DTS-Job) or the admin token."""
        who.may_manage(job_id, "end")
        return store.end_job(job_id, JobState(end.state), end.reason)

    @app.delete("/jobs/{job_id}", status_code=204, tags=["jobs"])
    def forget(job_id: JobIdP, who: As) -> Response:
        """Delete an ended job and its lineage edges (the job itself or the admin token)."""
        who.may_manage(job_id, "delete")
        store.forget_job(job_id)
        return Response(status_code=204)

    @app.get("/tables", response_model=list[TableStatus], tags=["tables"])
    def tables(_who: As) -> list[TableStatus]:
        return store.tables()

    @app.get("/tables/{table}", response_model=TableStatus, tags=["tables"])
    def table(table: Table, _who: As) -> TableStatus:
        return store.table(table)

    @app.get("/tables/{table}/barriers", response_model=list[BarrierRecord], tags=["tables"])
    def barriers(
        table: Table,
        _who: As,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
        before: Annotated[int | None, Query(ge=0, le=MAX_INT64)] = None,
    ) -> list[BarrierRecord]:
        """Completed barriers, newest first."""
        return store.barriers(table, limit=limit, before=before)

    @app.post("/tables/{table}/barriers", response_model=BarrierRecord, tags=["tables"])
    def report(table: Table, report: BarrierReport, who: As) -> BarrierRecord:
        """The table's committer reports a completed barrier and its snapshot id. A table
        with a running writer or flusher takes reports only from that job (its job_id)."""
        return store.report_barrier(
            TableBarrierReport(table=table, **report.model_dump()), anonymous_ok=who.admin
        )

    @app.post("/barriers", response_model=ReportCount, tags=["tables"])
    def report_many(
        reports: Annotated[list[TableBarrierReport], Body(max_length=MAX_BATCH)],
        who: As,
    ) -> ReportCount:
        """Report many completed barriers at once (the worker; rebuild, with the admin token)."""
        return ReportCount(count=store.report_barriers(reports, anonymous_ok=who.admin))

    @app.get("/consistent-version", response_model=ConsistentVersion, tags=["consistency"])
    def consistent(
        tables: Annotated[list[TableName], Query(min_length=1, max_length=1000)],
        _who: As,
        mode: ConsistencyMode = ConsistencyMode.STRONG,
    ) -> ConsistentVersion:
        """Strong: the greatest barrier completed by every listed table (and every table
        between them in the lineage) with each one's snapshot; weak: each one's latest."""
        return store.consistent_version(tables, mode)

    @app.get("/lineage", response_model=Graph, tags=["lineage"])
    def whole_graph(_who: As) -> Graph:
        edges = store.edges()
        return Graph(edges=edges, mermaid=render_mermaid(edges))

    @app.get("/lineage/{table}", response_model=Lineage, tags=["lineage"])
    def lineage(table: Table, _who: As) -> Lineage:
        """Upstream and downstream of a table, transitively, as a tree and as Mermaid."""
        return store.lineage(table)

    @app.get("/trace/{table}", response_model=Trace, tags=["lineage"])
    def trace(table: Table, _who: As) -> Trace:
        """Where the lag of a table starts: the upstream table and the job writing it."""
        return store.trace(table)


__all__ = ["create_app"]
