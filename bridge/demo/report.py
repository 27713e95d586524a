"""What the demo prints: addresses while it runs, progress lines, and the final rich tables."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from rich import box
from rich.console import Console
from rich.table import Table

from bridge.demo.checks import ReadCheck
from bridge.demo.generator import CdcGenerator
from bridge.demo.model import CUSTOMERS, DERIVED, ORDERS, SOURCES, TABLES
from bridge.demo.outcome import DemoRun
from filestore import Catalog

#: how the block the demo prints once it only keeps running ends: its last line, printed
#: after every address and command (one who reads the block waits for this, not its title)
EXPLORE_END = "the generator keeps writing every 2 s"


def _mark(ok: bool) -> str:
    return "[green]yes[/]" if ok else "[red]NO[/]"


def print_addresses(
    console: Console, addresses: dict[str, str], warehouse: str, logs: Path
) -> None:
    t = Table(title="Running now (127.0.0.1 only)", title_justify="left", box=box.SIMPLE_HEAD)
    t.add_column("part")
    t.add_column("address")
    for name, address in addresses.items():
        t.add_row(name, address)
    t.add_row("warehouse", warehouse)
    t.add_row("logs", str(logs))
    console.print(t)


def progress_line(catalog: Catalog, generator: CdcGenerator) -> str:
    """`orders@barrier(snapshots)` for every table: how far each part of the pipeline is."""
    parts = [f"generator: {generator.rounds} rounds"]
    for name in (*SOURCES, *DERIVED):
        snaps = catalog.get_table(name).snapshots()
        barrier = max((s.barrier or 0 for s in snaps), default=0)
        parts.append(f"{name.split('.')[1]}: {len(snaps)} snapshots, barrier {barrier or '-'}")
    return " | ".join(parts)


def read_line(check: ReadCheck) -> str:
    if check.error:
        return f"{check.mode} read: no consistent version: {check.error}"
    barriers = ", ".join(f"{t.split('.')[1]}@{b}" for t, (b, _) in check.versions.items())
    verdict = "agreed" if check.agreed else "did NOT agree"
    return f"{check.mode} consistent read ({barriers}): the three tables {verdict}"


def worker_records(worker_url: str) -> dict[str, float]:
    """records in per table from the worker's /metrics (what Prometheus would scrape)."""
    try:
        return worker_by_table(worker_url, "dts_worker_records_in", "dts_worker_records_in_total")
    except httpx.HTTPError:
        return {}


def worker_by_table(worker_url: str, family: str, sample: str | None = None) -> dict[str, float]:
    """Each table's value of one metric on the worker's /metrics (``by_table``).
    Raises httpx.HTTPError when the worker does not answer."""
    return by_table(worker_metrics(worker_url), family, sample)


def worker_metrics(worker_url: str) -> str:
    """The worker's /metrics page, once: a caller wanting several families parses it
    with ``by_table`` for each. Raises httpx.HTTPError when the worker does not answer."""
    response = httpx.get(f"{worker_url}/metrics", timeout=3.0)
    response.raise_for_status()
    return response.text


def by_table(metrics: str, family: str, sample: str | None = None) -> dict[str, float]:
    """Each table's value of one metric family in a /metrics page, summed over its other
    labels (its jobs). ``sample``: the sample's name where it is not the family's (a
    counter's ``<family>_total``)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(metrics):
        if fam.name != family:
            continue
        for s in fam.samples:
            if s.name == (sample or family):
                table = s.labels.get("table", "?")
                out[table] = out.get(table, 0.0) + s.value
    return out


def _tables(console: Console, run: DemoRun, catalog: Catalog) -> None:
    gen = run.generator
    t = Table(title="Tables", title_justify="left", box=box.SIMPLE_HEAD)
    t.add_column("table", no_wrap=True)
    t.add_column("fed by")
    t.add_column("changes +I ~U -D", no_wrap=True)
    t.add_column("snapshots", justify="right")
    t.add_column("last barrier", no_wrap=True)
    t.add_column("rows", justify="right")
    for d in TABLES:
        table = catalog.get_table(d.name)
        snaps = table.snapshots()
        barrier = max((s.barrier or 0 for s in snaps), default=0)
        short = d.name.split(".")[1]
        if gen is not None and short in gen.counts:
            c = gen.counts[short]
            fed_by = "CDC -> log -> worker"
            changes = f"{c.inserts} {c.updates} {c.deletes}"
        else:
            fed_by = f"Spark stream, {run.batches.get(d.name, 0)} batches"
            changes = "-"
        t.add_row(d.name, fed_by, changes, str(len(snaps)), str(barrier or "-"),
                  str(table.read().num_rows))  # fmt: skip
    console.print(t)
    for d in TABLES:
        if d.name in DERIVED:
            console.print(f"  {d.name}: {d.role.removeprefix('derived: ')}")
    if run.worker_records:
        recs = ", ".join(f"{k}: {int(v)}" for k, v in sorted(run.worker_records.items()))
        console.print(f"  worker /metrics dts_worker_records_in_total: {recs}")


def _reads(console: Console, run: DemoRun) -> None:
    t = Table(title="Consistent reads (FLIP-276)", title_justify="left", box=box.SIMPLE_HEAD)
    t.add_column("read")
    t.add_column("table", no_wrap=True)
    t.add_column("barrier", no_wrap=True)
    t.add_column("snapshot", justify="right")
    t.add_column("rows", justify="right")
    checks = []
    for check in (run.weak, run.strong):
        if check is None:
            continue
        label = f"{check.mode} ({check.engine})"
        if check.error:
            t.add_row(label, "-", "-", "-", "-")
            checks.append((check, f"no consistent version: {check.error}", False))
            continue
        for i, (table, (barrier, snap)) in enumerate(check.versions.items()):
            t.add_row(label if i == 0 else "", table, str(barrier), str(snap),
                      str(check.rows.get(table, "-")))  # fmt: skip
        for what, ok in check.checks:
            checks.append((check, what, ok))
    console.print(t)
    c = Table(title="Do the tables agree?", title_justify="left", box=box.SIMPLE_HEAD)
    c.add_column("read")
    c.add_column("check")
    c.add_column("holds")
    for check, what, ok in checks:
        c.add_row(check.mode, what, _mark(ok))
    console.print(c)
    if run.strong is not None:
        for detail in run.strong.details:
            console.print(f"[red]strong read: {detail}[/]")
    if run.strong is not None and run.strong.barrier is not None:
        verdict = "agreed" if run.strong.agreed else "DID NOT AGREE"
        console.print(
            f"strong consistent read at barrier {run.strong.barrier}: {verdict} "
            f"(orders and both derived tables read at that one barrier)"
        )
    if run.weak is not None and not run.weak.error:
        how = "one barrier by chance" if run.weak.same_barrier else "different barriers"
        verdict = "agreed" if run.weak.agreed else "did not agree"
        console.print(f"weak read (each table's latest, {how}): {verdict}")


def _travel(console: Console, run: DemoRun) -> None:
    tt = run.travel
    if tt is None:
        return
    t = Table(
        title=f"Time travel: {CUSTOMERS} at barrier {tt.customers_barrier} vs now",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for col in tt.changed.schema.names:
        t.add_column(col)
    for row in tt.changed.slice(0, 6).to_pylist():
        t.add_row(*(str(v) for v in row.values()))
    console.print(t)
    console.print(
        f"(barrier {tt.customers_barrier} = the initial load, read with Spark's option barrier) "
        f"{tt.changed.num_rows} of {tt.customers} customers changed since then; "
        f"{ORDERS}: {tt.orders_then} rows at barrier {tt.orders_barrier}, {tt.orders_now} now"
    )


def _ctas(console: Console, run: DemoRun) -> None:
    c = run.ctas
    if c is None:
        return
    t = Table(
        title=f"CTAS: {c.table}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for col in c.rows.schema.names:
        t.add_column(col)
    for row in c.rows.to_pylist():
        t.add_row(*(str(v) for v in row.values()))
    console.print(t)
    console.print(
        f"CREATE TABLE {c.table} AS SELECT the top customers at the strong barrier: "
        f"{c.seconds:.1f} s, published with {c.snapshots} snapshot"
    )
    console.print(f"CTAS table {c.table} present with {c.rows.num_rows} rows")
    left = ", ".join(c.staging_left) or "nothing"
    console.print(
        f"failing CTAS of {c.failed_table}: {c.failed_error}; table visible: "
        f"{'yes' if c.failed_visible else 'no'}; staging left: {left}"
    )


def _timings(console: Console, run: DemoRun) -> None:
    t = Table(title="Time per phase", title_justify="left", box=box.SIMPLE_HEAD)
    t.add_column("phase")
    t.add_column("seconds", justify="right")
    for name, seconds in run.timings:
        t.add_row(name, f"{seconds:.1f}")
    console.print(t)


def print_report(console: Console, run: DemoRun, catalog: Catalog) -> None:
    console.rule("[bold]What happened")
    _tables(console, run, catalog)
    _reads(console, run)
    _travel(console, run)
    _ctas(console, run)
    _timings(console, run)


def print_exploration(
    console: Console,
    addresses: dict[str, str],
    warehouse: str,
    logs: Path,
    client_exports: str | None = None,
) -> None:
    """``client_exports``: the secured demo's client settings as a shell line (None: none)."""
    console.rule("[bold]Still running: explore (Ctrl-C stops everything)")
    print_addresses(console, addresses, warehouse, logs)
    meta = addresses["MetaService"]
    worker_status = addresses["worker /status"]
    cmds = [
        f"curl -s {worker_status}",
        f"curl -s {addresses['worker /metrics']} | grep dts_worker_barrier",
        f"dts table snapshots {ORDERS} --warehouse {warehouse}",
        f"dts table scan {DERIVED[1]} --warehouse {warehouse}",
        f"dts meta consistent-version {ORDERS} {' '.join(DERIVED)} --meta-url {meta}",
        f"dts meta lineage {ORDERS} --meta-url {meta}",
        f"open {meta}/docs",
    ]
    console.print("[bold]Try[/] (in another terminal):")
    if client_exports is not None:
        cmds.insert(0, client_exports)
    for cmd in cmds:
        console.print(f"  {cmd}", soft_wrap=True, highlight=False)
    # one line however long the path: a reader waits for EXPLORE_END whole
    console.print(f"warehouse {warehouse} (kept); {EXPLORE_END}", soft_wrap=True, highlight=False)
