"""The MetaService's API models (pydantic): what goes over HTTP and what the store returns."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

# The consistent-version values are plain dataclasses (no pydantic) in bridge.meta.versions,
# so that a consistent read without the MetaService needs no pydantic; re-exported here.
from bridge.meta.versions import TABLE_PATTERN as TABLE_PATTERN
from bridge.meta.versions import ConsistencyMode as ConsistencyMode
from bridge.meta.versions import ConsistentVersion as ConsistentVersion
from bridge.meta.versions import TableVersion as TableVersion
from bridge.meta.versions import normalize_table_name as normalize_table_name

MAX_INT64 = 2**53 - 1  # the JSON-safe integer range; barrier ids are epoch ms
JOB_ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]*$"
_JOB_ID_RE = re.compile(JOB_ID_PATTERN)


def _check_job_id(job_id: str) -> str:
    if not (1 <= len(job_id) <= 128) or not _JOB_ID_RE.match(job_id):
        raise ValueError(
            f"invalid job id {job_id!r}: letters, digits, '_', '.', ':' and '-', 1-128 characters"
        )
    return job_id


TableName = Annotated[
    str,
    Field(min_length=1, max_length=255, pattern=TABLE_PATTERN, description="'db.table' or 'table'"),
    AfterValidator(normalize_table_name),
]
JobId = Annotated[
    str, Field(min_length=1, max_length=128, pattern=JOB_ID_PATTERN), AfterValidator(_check_job_id)
]


def _no_bool(v: object) -> object:
    # JSON true/false is no number (pydantic's lax mode would read it as 1/0); 7.0 is an
    # integer to JSON Schema, so lax int parsing stays for the rest.
    if isinstance(v, bool):
        raise ValueError("expected an integer, not a boolean")
    return v


_NO_BOOL = BeforeValidator(_no_bool)
BarrierId = Annotated[int, Field(ge=0, le=MAX_INT64, description="epoch milliseconds"), _NO_BOOL]
SnapshotId = Annotated[int, Field(ge=0, le=MAX_INT64), _NO_BOOL]
Millis = Annotated[int, Field(ge=0, le=MAX_INT64), _NO_BOOL]
TimeoutMs = Annotated[int, Field(ge=100, le=86_400_000), _NO_BOOL]


#: completed barriers the service keeps per table (``dts meta serve --keep-barriers``)
DEFAULT_PRUNE_KEEP = 100_000


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JobKind(StrEnum):
    WORKER = "worker"
    SPARK_STREAMING = "spark-streaming"
    SPARK_BATCH = "spark-batch"
    CTAS = "ctas"


class SinkRole(StrEnum):
    """How a job writes its sinks; decides which jobs may run on one table together.

    Per table, among running jobs: at most one ``writer`` or ``log-writer``, at most one
    ``flusher``, and never a ``writer`` beside a ``flusher`` (both would commit the
    table's FileStore: two sources of truth). A log writer and a flusher coexist.
    """

    WRITER = "writer"  # commits changes straight into the FileStore (file tier, batch, CTAS)
    LOG_WRITER = "log-writer"  # produces the table's changes into its log (target.tier=log)
    FLUSHER = "flusher"  # moves the table's own log into its FileStore (the Faust worker)


class JobState(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


class JobSpec(_Model):
    """A job to register: it reads ``sources`` and writes ``sinks``."""

    job_id: JobId | None = Field(None, description="stable id; generated when omitted")
    kind: JobKind
    sources: list[TableName] = Field(default_factory=list, max_length=1000)
    sinks: list[TableName] = Field(min_length=1, max_length=1000)
    role: SinkRole = Field(
        SinkRole.WRITER,
        description="how the job writes its sinks: writer (FileStore tier), log-writer "
        "(the table's log) or flusher (moves the table's log into its FileStore; its sources, if "
        "any, add no lineage edges)",
    )
    heartbeat_timeout_ms: TimeoutMs | None = Field(None, description="service default when omitted")
    description: str = Field("", max_length=1000)


class Job(_Model):
    job_id: str
    kind: JobKind
    sources: list[str]
    sinks: list[str]
    role: SinkRole = SinkRole.WRITER
    state: JobState
    description: str = ""
    registered_at_ms: int
    heartbeat_at_ms: int
    ended_at_ms: int | None = None
    reason: str = ""
    heartbeat_timeout_ms: int


class JobEnd(_Model):
    """How a job ended; releases its writer slots (its lineage stays)."""

    state: Literal[JobState.FINISHED, JobState.FAILED, JobState.CANCELLED] = JobState.FINISHED
    reason: str = Field("", max_length=1000)


class BarrierReport(_Model):
    """A table completed a barrier: reported by the table's committer."""

    barrier: BarrierId
    snapshot_id: SnapshotId | None = Field(
        None, description="the snapshot committed for the barrier (None when unknown)"
    )
    job_id: JobId | None = Field(
        None, description="the reporting job; if given it must be the table's running writer"
    )
    completed_at_ms: Millis | None = Field(None, description="defaults to the service's clock")


class TableBarrierReport(BarrierReport):
    table: TableName


class BarrierRecord(_Model):
    table: str
    barrier: int
    snapshot_id: int | None
    completed_at_ms: int
    job_id: str | None = None


class TableStatus(_Model):
    table: str
    latest_barrier: int | None
    latest_snapshot_id: int | None
    latest_completed_at_ms: int | None
    barrier_count: int
    writer_job_id: str | None = Field(description="the running writer or log writer")
    flusher_job_id: str | None = Field(None, description="the running flusher")
    upstream: list[str]
    downstream: list[str]


class LineageEdge(_Model):
    source: str
    sink: str
    job_id: str
    job_state: JobState


class LineageNode(_Model):
    table: str
    jobs: list[str]
    children: list[LineageNode] = Field(default_factory=list)


class Lineage(_Model):
    table: str
    upstream: list[LineageNode]
    downstream: list[LineageNode]
    edges: list[LineageEdge]
    tree: str
    mermaid: str


class Trace(_Model):
    """Where the lag of a table starts."""

    table: str
    latest_barrier: int | None
    lag_ms: int | None = Field(
        description="newest upstream barrier (or now, for a root) minus ours"
    )
    origin_table: str = Field(description="the most upstream table that lags as much")
    origin_lag_ms: int | None
    origin_job_id: str | None = Field(description="the job writing the origin table")
    origin_job_state: JobState | None
    origin_heartbeat_age_ms: int | None
    path: list[str] = Field(description="from the table up to the origin")
    explanation: str


class RebuildResult(_Model):
    tables: int
    barriers: int
    skipped_tables: list[str] = Field(default_factory=list)


class Health(_Model):
    status: Literal["ok"] = "ok"
    database: str = Field(description="the database kind (sqlite, postgresql); never its URL")
    auth: Literal["open", "bearer"] = "open"
    heartbeat_timeout_ms: int
