"""Registering Spark jobs with the MetaService (FLIP-276), when option `meta.url` is set.

An https MetaService is verified with option `meta.ca-file` (session default
`spark.dts.meta.ca-file`), else the environment's DTS_META_CA_FILE; the bearer token is
option `meta.token`, else DTS_META_TOKEN.

Where registration happens, and why it is deterministic across Spark's Python workers
(every `commit` runs in a fresh driver-side worker, tasks in executor workers):

- Streaming sink: job id `spark-streaming-<query id>`, the query id being the one Spark
  keeps in `<checkpoint>/metadata` (the same in every worker and across restarts).
  Each micro-batch's `commit` registers the job before committing; the MetaService
  treats a repeated registration of a running job with the same tables as a re-attach
  (and a heartbeat), so this is idempotent. Sources = the `dts` tables named in that
  batch's offset log line (plus option `meta.sources`), sinks = the sink table. After
  the snapshot commits, its barrier is reported (`report_barrier(table, barrier,
  snapshot_id, job_id)`); a replayed batch reports again (idempotent), so a crash
  between commit and report loses nothing. The job's role is `writer` (it commits
  the FileStore), or with `target.tier=log` `log-writer`: it writes the table's log
  and reports no barrier (the FileStore snapshot for it is the worker's to commit);
  the MetaService lets a log writer run beside the table's worker job (a flusher)
  and refuses a FileStore-tier writer there.
- Batch write and CTAS: job id `spark-batch-<uuid>` / `ctas-<uuid>`, registered once
  on the driver while Spark plans the write (role `writer`); the id travels inside the
  pickled writer.
  Tasks heartbeat once each (best effort); the driver-side `commit` reports the
  snapshot's barrier (if it has one) and finishes the job, `abort` marks it failed.
  Sources come only from option `meta.sources` (a data source cannot see the plan).

A streaming query has no "stopped" hook in a sink. On the driver,
`finish_jobs_on_stop(spark, url)` adds a StreamingQueryListener that finishes a query's
job when the query stops (or marks it failed, with the reason, when it failed);
without it the job stays running until its heartbeat timeout (option
`meta.heartbeat-timeout-ms`, default 10 minutes, renewed by every micro-batch) lapses,
or call `finish_streaming_job(url, checkpoint)` after `query.stop()`.

A refusal (a second writer of the table, a FileStore-tier writer beside its worker, a
cycle) raises `JobRefused` naming the job that holds the table; Spark surfaces it as
the write's / query's error.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from typing import TYPE_CHECKING, Any

from bridge.spark.errors import JobRefused
from bridge.spark.options import CommonOptions, WriteOptions
from bridge.spark.options.keys import session_defaults
from bridge.spark.write._checkpoint import query_id

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from filestore import Snapshot

log = logging.getLogger(__name__)

WRITER = "writer"  # bridge.meta.models.SinkRole values (not imported: Spark workers stay light)
LOG_WRITER = "log-writer"

STREAMING = "spark-streaming"
BATCH = "spark-batch"
CTAS = "ctas"


def streaming_job_id(query_id: str) -> str:
    return f"{STREAMING}-{query_id}"


def new_job_id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex}"


def _client(url: str, ca_file: str | None = None, token: str | None = None) -> Any:
    """A MetaService client; ``ca_file`` and ``token`` left None come from the environment
    (DTS_META_CA_FILE, DTS_META_TOKEN), as for every other client."""
    from bridge.meta.client import MetaClient

    return MetaClient(url, ca_file=ca_file, token=token)


def _job_client(common: CommonOptions) -> Any:
    """The client of a write's options (`meta.url`, `meta.ca-file`, `meta.token`)."""
    assert common.meta_url is not None
    return _client(common.meta_url, common.meta_ca_file, common.meta_token)


def register(
    opts: WriteOptions,
    kind: str,
    job_id: str,
    sources: list[str] | None = None,
    *,
    role: str = WRITER,
) -> str | None:
    """Register (or re-attach to) job `job_id` writing `opts`' table; None without meta.url.

    `role`: `writer` (commits the FileStore) or `log-writer` (target.tier=log: writes the
    table's log, which the table's worker job, a flusher, moves into the FileStore).
    """
    url = opts.common.meta_url
    if not url:
        return None  # before importing the MetaService's client: a write needs no pydantic
    from bridge.meta.errors import CycleError, JobAlreadyExists, WriterConflict

    srcs = list(dict.fromkeys([*(sources or []), *opts.meta_sources]))
    with _job_client(opts.common) as client:
        try:
            client.register_job(
                kind,
                srcs,
                [opts.common.table],
                job_id=job_id,
                heartbeat_timeout_ms=opts.meta_heartbeat_timeout_ms,
                description=f"Spark {kind} writing {opts.common.table}",
                role=role,
            )
        except (WriterConflict, CycleError, JobAlreadyExists) as e:
            raise JobRefused(
                f"MetaService {url} refused {kind} job {job_id} writing {opts.common.table}: "
                f"{e.message}"
            ) from e
    return job_id


def heartbeat(opts: WriteOptions, job_id: str | None) -> None:
    """Best effort (tasks): a missed heartbeat only matters once the timeout lapses."""
    if not opts.common.meta_url or job_id is None:
        return
    with contextlib.suppress(Exception), _job_client(opts.common) as client:
        client.heartbeat(job_id)


def report(opts: WriteOptions, job_id: str | None, snapshot: Snapshot | None) -> None:
    """Report the barrier `snapshot` completed for the sink table (no-op without one)."""
    if not opts.common.meta_url or job_id is None or snapshot is None:
        return
    if snapshot.barrier is None:
        return
    with _job_client(opts.common) as client:
        client.report_barrier(
            opts.common.table, int(snapshot.barrier), int(snapshot.id), job_id=job_id
        )


def finish(opts: WriteOptions, job_id: str | None, *, failed: str | None = None) -> None:
    """Finish a batch/CTAS job (failed with a reason when `failed` is given)."""
    if not opts.common.meta_url or job_id is None:
        return
    with _job_client(opts.common) as client:
        if failed is None:
            client.finish_job(job_id, "finished", own=True)
        else:
            client.finish_job(job_id, "failed", failed[:1000], own=True)


def finish_streaming_job(
    url: str,
    checkpoint: str,
    state: str = "finished",
    *,
    ca_file: str | None = None,
    token: str | None = None,
) -> None:
    """Mark the streaming query of `checkpoint` finished (call after `query.stop()`);
    `ca_file` and `token` as the query's `meta.ca-file` and `meta.token` (None: the
    environment's)."""
    with _client(url, ca_file, token) as client:
        client.finish_job(streaming_job_id(query_id(checkpoint)), state, own=True)


def finish_jobs_on_stop(
    spark: SparkSession, url: str, *, ca_file: str | None = None, token: str | None = None
) -> Any:
    """Finish each streaming query's job when the query stops (failed, with the reason,
    when it failed). Returns the listener (``spark.streams.removeListener`` undoes it).
    `ca_file` defaults to the conf `spark.dts.meta.ca-file`, then DTS_META_CA_FILE; `token`
    to DTS_META_TOKEN."""
    ca_file = ca_file or session_defaults(spark).get("meta.ca-file")
    from pyspark.sql.streaming.listener import StreamingQueryListener

    from bridge.meta.errors import JobNotFound, MetaError

    class JobFinisher(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            pass

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            job_id = streaming_job_id(str(event.id))
            failed = event.exception is not None
            try:
                with _client(url, ca_file, token) as client:
                    client.finish_job(
                        job_id,
                        "failed" if failed else "finished",
                        event.exception or "",
                        own=True,
                    )
            except JobNotFound:
                pass  # a query that writes no `dts` table with meta.url has no job
            except MetaError as e:
                log.warning("could not finish job %s in the MetaService at %s: %s", job_id, url, e)

    listener = JobFinisher()
    spark.streams.addListener(listener)
    return listener
