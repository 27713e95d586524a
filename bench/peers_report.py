"""The peer benchmark's report: the fastest run per phase, the check of every read against
the input, the rates table and the ratios (printed, and as the README's bench_peers
section)."""

from __future__ import annotations

import argparse
from typing import Any

from bench.peers_data import BATCHES, BUCKETS

GIB = 1 << 30
BEGIN, END = "<!-- bench_peers:begin -->", "<!-- bench_peers:end -->"
# the phases that read the merged table: each must return the input's count and sum
READS = ("dts_read", "dts_read_dv", "paimon_read", "paimon_rust_read", "delta_read")


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest of several runs of a phase (a loaded machine only ever slows a run down);
    peak RSS is the largest seen."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[-1]
    best = dict(min(ok, key=lambda r: r["seconds"]))
    best["peak_rss_bytes"] = max(r["peak_rss_bytes"] for r in ok)
    best["runs"] = len(ok)
    return best


def check(results: dict[str, Any], want: tuple[int, float] | None) -> list[str]:
    """Every merge-read that ran must return the input's rows (the last write of each key)
    and their ``sum(amount)``. Returns the problems (empty: all agree)."""
    if want is None:
        return []
    count, total = want
    problems = []
    for name in READS:
        got = results.get(name)
        if got is None or "error" in got:
            continue  # not run, or failed (the table says so)
        rows, amount = got["rows"], got.get("amount_sum")
        # the systems add the same floats in different orders (rounding: < 1e-10 of the
        # sum at 1M rows); one row with a stale amount moves it by ~1e-6
        if rows != count or amount is None or abs(amount - total) > 1e-9 * max(1.0, abs(total)):
            problems.append(f"{name}: got {rows:,} rows, sum {amount}; want {count:,}, {total}")
    return problems


def ratio(results: dict[str, Any], a: str, b: str) -> float | None:
    ra, rb = results.get(a, {}).get("rows_per_s"), results.get(b, {}).get("rows_per_s")
    return ra / rb if ra and rb else None


def ratios(results: dict[str, Any]) -> dict[str, tuple[float | None, float | None]]:
    """Each comparison: (this project's rows/s over the peer's, the target or None)."""
    out: dict[str, tuple[float | None, float | None]] = {
        "write vs deltalake merge (>= 1.2x)": (ratio(results, "dts_write", "delta_write"), 1.2),
        "write vs pypaimon-rust (>= 1x)": (ratio(results, "dts_write", "paimon_rust_write"), 1.0),
        "write vs pypaimon (>= 10x)": (ratio(results, "dts_write", "paimon_write"), 10.0),
        "write, both snappy, vs deltalake merge": (
            ratio(results, "dts_write_snappy", "delta_write"),
            None,
        ),
        "write vs raw pyarrow": (ratio(results, "dts_write", "raw_write"), None),
        "merge-read vs deltalake (>= 1.5x)": (ratio(results, "dts_read", "delta_read"), 1.5),
        "merge-read vs pypaimon-rust": (ratio(results, "dts_read", "paimon_rust_read"), None),
        "merge-read vs pypaimon (>= 10x)": (ratio(results, "dts_read", "paimon_read"), 10.0),
        "merge-read vs raw read (>= 1/3)": (ratio(results, "dts_read", "raw_read"), 1 / 3),
        "read with deletion vectors vs deltalake (>= 1.5x)": (
            ratio(results, "dts_read_dv", "delta_read"),
            1.5,
        ),
        "read with deletion vectors vs pypaimon-rust merge-read": (
            ratio(results, "dts_read_dv", "paimon_rust_read"),
            None,
        ),
        "read with deletion vectors vs merge-read": (
            ratio(results, "dts_read_dv", "dts_read"),
            None,
        ),
        "changes: stored (auto) vs diff": (
            ratio(results, "dts_changes", "dts_changes_diff"),
            None,
        ),
    }
    # the five upserts into the written table, each system's own way (dts: a commit that
    # looks its old values up and stores the changelog, or marks deletion vectors;
    # deltalake: MERGE, rewriting the files it touches; pypaimon-rust: new sorted runs)
    dts_upserts = {
        "upserts, stored changelog": "dts_changes",
        "upserts, deletion vectors": "dts_read_dv",
    }
    peer_upserts = {"deltalake MERGE": "delta_read", "pypaimon-rust": "paimon_rust_read"}
    for label, phase in dts_upserts.items():
        for peer, peer_phase in peer_upserts.items():
            out[f"{label}, vs {peer}"] = (upsert_ratio(results, phase, peer_phase), None)
    out["upserts with deletion vectors vs without (stored changelog both)"] = (
        upsert_ratio(results, "dts_read_dv", "dts_changes"),
        None,
    )
    return out


def upsert_ratio(results: dict[str, Any], dts_phase: str, peer_phase: str) -> float | None:
    """The peer's time for the five upsert batches over this project's (both timed by the
    phase that then reads the table: ``write_seconds``)."""
    ours = results.get(dts_phase, {}).get("write_seconds")
    theirs = results.get(peer_phase, {}).get("write_seconds")
    return theirs / ours if ours and theirs else None


#: a read phase times its second read (``peers_data.timed_read``); the first is shown too
FIRST_READ = "first read s"


def _met(value: float | None, target: float | None) -> str:
    return "" if target is None or value is None else ("yes" if value >= target else "NO")


#: CPU seconds of every thread of the phase's process over its wall seconds, timed section
#: only (``peers_data.Stopwatch``): near the machine's cores, the phase is bounded by them
CORES = "cores busy"


def _cores(r: dict[str, Any]) -> str:
    cpu = r.get("cpu_seconds")
    return "" if cpu is None or not r["seconds"] else f"{cpu / r['seconds']:.2f}"


def _rate_cells(r: dict[str, Any]) -> list[str]:
    if "error" in r:
        return ["-", "-", "-", "failed", "-", "-", "-"]
    written = r.get("parquet_bytes")
    first = r.get("first_seconds")
    return [
        f"{r['rows']:,}",
        f"{r['seconds']:.2f}",
        "" if first is None else f"{first:.2f}",
        f"{r['rows_per_s']:,.0f}",
        _cores(r),
        f"{r['peak_rss_bytes'] / 2**20:,.0f}",
        "" if written is None else f"{written / 2**20:,.1f}",
    ]


def report(
    results: dict[str, Any], args: argparse.Namespace, problems: list[str]
) -> dict[str, Any]:
    from rich.console import Console
    from rich.table import Table as RichTable

    rates = RichTable(title=f"peer benchmark, {args.rows:,} rows, {BUCKETS} buckets")
    columns = ("phase", "rows", "seconds", FIRST_READ, "rows/s", CORES, "peak RSS MiB")
    for c in (*columns, "Parquet MiB"):
        rates.add_column(c, justify="right")
    for name, r in results.items():
        rates.add_row(name, *_rate_cells(r))
    table = RichTable(title="ratios (this project / peer, by rows/s)")
    for c in ("comparison", "ratio", "target met"):
        table.add_column(c)
    summary: dict[str, Any] = {}
    for label, (value, target) in ratios(results).items():
        table.add_row(label, "n/a" if value is None else f"{value:.2f}x", _met(value, target))
        summary[label] = {"ratio": value, "target": target}
    mem = results.get("dts_memory", {})
    if "peak_rss_bytes" in mem:
        ok = mem["peak_rss_bytes"] < 2 * GIB
        table.add_row(
            f"memory: {args.memory_rows:,} rows, default write buffer (< 2 GiB)",
            f"{mem['peak_rss_bytes'] / GIB:.2f} GiB",
            "yes" if ok else "NO",
        )
        summary["memory_peak_gib"] = mem["peak_rss_bytes"] / GIB
    console = Console()
    console.print(rates)
    console.print(table)
    ran = [name for name in READS if name in results and "error" not in results[name]]
    for problem in problems:
        console.print(f"[bold red]check failed[/]: {problem}")
    if ran and not problems:
        console.print(f"reads match the input (count and sum(amount)): {', '.join(ran)}")
    return summary


def _shown_argv(argv: list[str]) -> list[str]:
    """The run's arguments less where it wrote (this machine's paths)."""
    shown, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--out", "--readme"):
            skip = True
        elif not arg.startswith(("--out=", "--readme=")):
            shown.append(arg)
    return shown


def markdown(doc: dict[str, Any]) -> str:
    """The README's bench_peers section from the run's JSON document."""
    load, results, rows = doc["load"], doc["results"], doc["rows"]
    dts = doc["versions"]["dts"]
    argv = _shown_argv(doc["argv"])
    lines = [
        f"Last run: {doc['finished']} (UTC), `python -m bench.bench_peers "
        f"{' '.join(argv)}`, {load['cores']} cores, load average (1 min) "
        f"{load['before']:.2f} before, {load['after']:.2f} after.",
        "",
        f"- Data: {rows:,} rows, then {BATCHES} upsert batches of {rows // BATCHES:,} "
        f"(half updates, half new keys), {BUCKETS} buckets; best of {doc['repeat']} "
        "run(s) per phase (pypaimon and memory: one).",
        f"- This project: commit {dts['commit']}, pyarrow {dts.get('pyarrow', '?')}.",
    ]
    peers = doc["versions"].get("peers")
    if peers:
        lines.append("- Peers' venv: " + ", ".join(f"{k} {v}" for k, v in peers.items()) + ".")
    ran = [name for name in READS if name in results and "error" not in results[name]]
    if doc["problems"]:
        lines.append(f"- **Check failures**: {'; '.join(doc['problems'])}.")
    elif ran:
        want = doc["expected"]
        lines.append(
            f"- Every merge-read ({', '.join(f'`{n}`' for n in ran)}) returned the input's "
            f"{want['rows']:,} rows and sum(amount)."
        )
    lines += [
        "",
        f"| phase | rows | seconds | {FIRST_READ} | rows/s | {CORES} | peak RSS MiB | Parquet MiB |",
    ]
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    lines += [f"| {name} | " + " | ".join(_rate_cells(r)) + " |" for name, r in results.items()]
    lines += ["", "| comparison (this project / peer, rows/s) | ratio | target met |"]
    lines.append("|---|---:|---|")
    for label, (value, target) in ratios(results).items():
        shown = "n/a" if value is None else f"{value:.2f}x"
        lines.append(f"| {label} | {shown} | {_met(value, target)} |")
    mem = doc["summary"].get("memory_peak_gib")
    if mem is not None:
        ok = "yes" if mem < 2 else "NO"
        lines.append(
            f"| memory: {doc['memory_rows']:,} rows, default write buffer (< 2 GiB) "
            f"| {mem:.2f} GiB | {ok} |"
        )
    return "\n".join(lines) + "\n"
