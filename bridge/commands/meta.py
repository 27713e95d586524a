"""`dts meta ...`: run the MetaService and call every one of its operations."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click
from pydantic import TypeAdapter

from bridge.meta.client import DEFAULT_URL, MetaClient
from bridge.meta.errors import MetaError
from bridge.meta.models import ConsistencyMode, JobKind, JobState, SinkRole
from filestore import Catalog

F = TypeVar("F", bound=Callable[..., Any])


class _AliasOption(click.Option):
    """An option whose old spellings still work but are not shown in the help.

    Every command names the MetaService address ``--meta-url`` (the worker, Spark jobs,
    docs/cli.md); ``dts meta`` used to call it ``--url``, which scripts may still pass.
    """

    def __init__(self, *args: Any, hidden_aliases: tuple[str, ...] = (), **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.hidden_aliases = hidden_aliases

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        shown = [o for o in self.opts if o not in self.hidden_aliases]
        opts, self.opts = self.opts, shown
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = opts


_url_option = click.option(
    "--meta-url",
    "--url",
    "url",
    cls=_AliasOption,
    hidden_aliases=("--url",),
    envvar="DTS_META_URL",
    default=DEFAULT_URL,
    show_default=True,
    help="MetaService address.",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
_as_job_option = click.option(
    "--as-job",
    is_flag=True,
    help="Act as the job itself (a script ending the job it registered); else admin token.",
)


@click.group()
def meta() -> None:
    """MetaService: jobs, lineage, barrier progress, consistent versions (FLIP-276)."""


def _client(url: str) -> MetaClient:
    # an operator's tool: the admin token when one is set (ending other jobs, rebuild)
    return MetaClient(url, admin=True)


def _run(fn: Callable[[], Any]) -> Any:
    """Turn service refusals into one clear line and exit code 1."""
    try:
        return fn()
    except MetaError as e:
        hint = ""
        if e.code == "unavailable":
            hint = "; start one with `dts meta serve`, or pass --meta-url (or DTS_META_URL)"
        raise click.ClickException(f"{e.code}: {e.message}{hint}") from None


_ANY: TypeAdapter[Any] = TypeAdapter(Any)


def _print(obj: Any, as_json: bool) -> None:
    # the API models and the consistent version (a dataclass) alike, enums as their values
    data = _ANY.dump_python(obj, mode="json")
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    rows = data if isinstance(data, list) else [data]
    for row in rows:
        click.echo("  ".join(f"{k}={_short(v)}" for k, v in row.items()))


def _short(v: Any) -> str:
    if isinstance(v, list):
        return ",".join(map(str, v)) or "-"
    return "-" if v is None or v == "" else str(v)


def default_db(db: str | None, warehouse: str | None) -> str:
    # bridge.meta.store loads SQLAlchemy: only for the commands that open the database
    from bridge.meta.store import default_url

    if db:
        return db
    if not warehouse:
        raise click.UsageError("give --db URL or --warehouse W (env DTS_WAREHOUSE)")
    if "://" in warehouse and not warehouse.startswith("file://"):
        raise click.UsageError(
            f"the embedded SQLite database needs a local warehouse, not {warehouse}; give --db URL"
        )
    return default_url(warehouse.removeprefix("file://"))


# ---- jobs ---------------------------------------------------------------------------------


@meta.group()
def jobs() -> None:
    """Register, list, heartbeat and finish jobs."""


@jobs.command("register")
@click.option("--kind", type=click.Choice([k.value for k in JobKind]), required=True)
@click.option("--source", "sources", multiple=True, help="A table the job reads (repeat).")
@click.option(
    "--sink", "sinks", multiple=True, required=True, help="A table the job writes (repeat)."
)
@click.option(
    "--role",
    type=click.Choice([r.value for r in SinkRole]),
    default=SinkRole.WRITER.value,
    show_default=True,
    help="How the job writes its sinks: writer (into the FileStore), log-writer (the "
    "table's log) or flusher (moves the table's log into the FileStore; no sources).",
)
@click.option("--job-id", help="Stable id (generated when omitted).")
@click.option(
    "--heartbeat-timeout-ms", type=click.IntRange(100), help="Service default when omitted."
)
@_url_option
@_json_option
def jobs_register(
    kind: str,
    sources: tuple[str, ...],
    sinks: tuple[str, ...],
    role: str,
    job_id: str | None,
    heartbeat_timeout_ms: int | None,
    url: str,
    as_json: bool,
) -> None:
    """Register a job; refused when it would make a cycle, a second writer or flusher of a
    table, or a writer beside a flusher."""
    with _client(url) as c:
        job = _run(
            lambda: c.register_job(
                kind,
                sources,
                sinks,
                job_id=job_id,
                heartbeat_timeout_ms=heartbeat_timeout_ms,
                role=role,
            )
        )
    _print(job, as_json)


@jobs.command("list")
@click.option("--state", type=click.Choice([s.value for s in JobState]))
@_url_option
@_json_option
def jobs_list(state: str | None, url: str, as_json: bool) -> None:
    """List jobs (optionally by state)."""
    with _client(url) as c:
        _print(_run(lambda: c.list_jobs(state)), as_json)


@jobs.command("show")
@click.argument("job_id")
@_url_option
@_json_option
def jobs_show(job_id: str, url: str, as_json: bool) -> None:
    """Show one job."""
    with _client(url) as c:
        _print(_run(lambda: c.get_job(job_id)), as_json)


@jobs.command("heartbeat")
@click.argument("job_id")
@_url_option
@_json_option
def jobs_heartbeat(job_id: str, url: str, as_json: bool) -> None:
    """Tell the service the job is alive."""
    with _client(url) as c:
        _print(_run(lambda: c.heartbeat(job_id)), as_json)


@jobs.command("finish")
@click.argument("job_id")
@click.option(
    "--state",
    type=click.Choice([JobState.FINISHED.value, JobState.FAILED.value, JobState.CANCELLED.value]),
    default=JobState.FINISHED.value,
    show_default=True,
)
@click.option("--reason", default="")
@_as_job_option
@_url_option
@_json_option
def jobs_finish(
    job_id: str, state: str, reason: str, as_job: bool, url: str, as_json: bool
) -> None:
    """End a job: frees the tables it writes (its lineage stays). Another job's needs the
    admin token (env DTS_META_ADMIN_TOKEN)."""
    with _client(url) as c:
        _print(_run(lambda: c.finish_job(job_id, state, reason, own=as_job)), as_json)


@jobs.command("forget")
@click.argument("job_id")
@_as_job_option
@_url_option
def jobs_forget(job_id: str, as_job: bool, url: str) -> None:
    """Delete an ended job and its lineage edges (another job's: the admin token)."""
    with _client(url) as c:
        _run(lambda: c.forget_job(job_id, own=as_job))
    click.echo(f"forgot job {job_id}")


# ---- tables and barriers ------------------------------------------------------------------


@meta.command()
@_url_option
@_json_option
def tables(url: str, as_json: bool) -> None:
    """Every known table: latest completed barrier, snapshot, writer, neighbours."""
    with _client(url) as c:
        _print(_run(c.tables), as_json)


@meta.command()
@click.argument("table")
@click.option("--limit", type=click.IntRange(1, 10_000), default=20, show_default=True)
@_url_option
@_json_option
def barriers(table: str, limit: int, url: str, as_json: bool) -> None:
    """A table's completed barriers, newest first."""
    with _client(url) as c:
        _print(_run(lambda: c.barriers(table, limit=limit)), as_json)


@meta.command()
@click.argument("table")
@click.argument("barrier", type=click.IntRange(0))
@click.option("--snapshot-id", type=click.IntRange(0))
@click.option("--job-id", help="The reporting job (must be the table's running writer).")
@_url_option
@_json_option
def report(
    table: str, barrier: int, snapshot_id: int | None, job_id: str | None, url: str, as_json: bool
) -> None:
    """Report that TABLE completed BARRIER (what a committer does)."""
    with _client(url) as c:
        _print(_run(lambda: c.report_barrier(table, barrier, snapshot_id, job_id=job_id)), as_json)


# ---- consistency and lineage --------------------------------------------------------------


@meta.command("consistent-version")
@click.argument("tables", nargs=-1, required=True)
@click.option(
    "--mode",
    type=click.Choice([m.value for m in ConsistencyMode]),
    default="strong",
    show_default=True,
)
@_url_option
@_json_option
def consistent_version(tables: tuple[str, ...], mode: str, url: str, as_json: bool) -> None:
    """The barrier and snapshots to read TABLES together, and who holds them back."""
    with _client(url) as c:
        v = _run(lambda: c.consistent_version(list(tables), ConsistencyMode(mode)))
    if as_json:
        _print(v, True)
        return
    click.echo(v.message)
    for t in v.tables:
        note = "" if t.listed else "  (between the listed tables)"
        click.echo(
            f"  {t.table}: barrier={_short(t.barrier)} snapshot={_short(t.snapshot_id)} "
            f"latest={_short(t.latest_barrier)} behind_ms={_short(t.behind_ms)} "
            f"lag_ms={_short(t.lag_ms)}{note}"
        )


@meta.command()
@click.argument("table", required=False)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["tree", "mermaid", "both"]),
    default="both",
    show_default=True,
)
@_url_option
@_json_option
def lineage(table: str | None, fmt: str, url: str, as_json: bool) -> None:
    """Upstream and downstream of TABLE, transitively (whole graph without TABLE)."""
    with _client(url) as c:
        if table is None:
            edges, mermaid = _run(c.graph)
            if as_json:
                click.echo(json.dumps([e.model_dump(mode="json") for e in edges], indent=2))
            else:
                click.echo(mermaid)
            return
        lin = _run(lambda: c.lineage(table))
    if as_json:
        _print(lin, True)
        return
    if fmt in ("tree", "both"):
        click.echo(lin.tree)
    if fmt == "both":
        click.echo()
    if fmt in ("mermaid", "both"):
        click.echo("```mermaid\n" + lin.mermaid + "\n```")


@meta.command()
@click.argument("table")
@_url_option
@_json_option
def trace(table: str, url: str, as_json: bool) -> None:
    """Where the lag of TABLE starts: the upstream table and the job writing it."""
    with _client(url) as c:
        t = _run(lambda: c.trace(table))
    if as_json:
        _print(t, True)
    else:
        click.echo(t.explanation)


@meta.command()
@click.option("--warehouse", envvar="DTS_WAREHOUSE", required=True, help="The FileStore to read.")
@click.option("--db", help="Write into this database directly (default: the warehouse's).")
@click.option(
    "--meta-url",
    "--url",
    "url",
    cls=_AliasOption,
    hidden_aliases=("--url",),
    help="Report through a running MetaService instead.",
)
@click.option("--table", "tables", multiple=True, help="Only these tables (repeat).")
@click.option("--replace", is_flag=True, help="Clear each table's records first (direct only).")
def rebuild(
    warehouse: str, db: str | None, url: str | None, tables: tuple[str, ...], replace: bool
) -> None:
    """Reload every table's completed barriers and snapshot ids from the FileStore."""
    # bridge.meta.rebuild and .store (SQLAlchemy) cost `dts --help` ~25 ms and ~250 ms
    from bridge.meta.rebuild import rebuild as do_rebuild

    catalog = Catalog(warehouse)

    def progress(name: str, n: int) -> None:
        click.echo(f"  {name}: {n} barriers")

    if url:
        if replace:
            raise click.UsageError("--replace needs direct database access (drop --meta-url)")
        with _client(url) as c:
            result = _run(lambda: do_rebuild(c, catalog, list(tables) or None, progress=progress))
    else:
        from bridge.meta.store import Store

        store = Store(default_db(db, warehouse))
        try:
            result = _run(
                lambda: do_rebuild(
                    store, catalog, list(tables) or None, replace=replace, progress=progress
                )
            )
        finally:
            store.close()
    click.echo(f"rebuilt {result.barriers} barriers of {result.tables} tables")
    if result.skipped_tables:
        click.echo(f"no barrier-tagged snapshot in: {', '.join(result.skipped_tables)}")
