"""The peer benchmark's report: the fastest run per phase, the rates table and the ratios."""

from __future__ import annotations

import argparse
from typing import Any

from bench.peers_data import BUCKETS

GIB = 1 << 30


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


def ratio(results: dict[str, Any], a: str, b: str) -> float | None:
    ra, rb = results.get(a, {}).get("rows_per_s"), results.get(b, {}).get("rows_per_s")
    return ra / rb if ra and rb else None


def report(results: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    from rich.console import Console
    from rich.table import Table as RichTable

    rates = RichTable(title=f"peer benchmark, {args.rows:,} rows, {BUCKETS} buckets")
    for c in ("phase", "rows", "seconds", "rows/s", "peak RSS MiB", "Parquet MiB"):
        rates.add_column(c, justify="right")
    for name, r in results.items():
        if "error" in r:
            rates.add_row(name, "-", "-", "failed", "-", "-")
            continue
        written = r.get("parquet_bytes")
        rates.add_row(
            name,
            f"{r['rows']:,}",
            f"{r['seconds']:.2f}",
            f"{r['rows_per_s']:,.0f}",
            f"{r['peak_rss_bytes'] / 2**20:,.0f}",
            "" if written is None else f"{written / 2**20:,.1f}",
        )
    targets = {
        "write vs pypaimon (>= 10x)": (ratio(results, "dts_write", "paimon_write"), 10.0),
        "write vs deltalake merge (>= 1x)": (ratio(results, "dts_write", "delta_write"), 1.0),
        "write, both snappy, vs deltalake merge": (
            ratio(results, "dts_write_snappy", "delta_write"),
            None,
        ),
        "write vs raw pyarrow": (ratio(results, "dts_write", "raw_write"), None),
        "merge-read vs pypaimon (>= 10x)": (ratio(results, "dts_read", "paimon_read"), 10.0),
        "merge-read vs deltalake": (ratio(results, "dts_read", "delta_read"), None),
        "merge-read vs raw read (>= 1/3)": (ratio(results, "dts_read", "raw_read"), 1 / 3),
        "read with deletion vectors vs deltalake (>= 1.5x)": (
            ratio(results, "dts_read_dv", "delta_read"),
            1.5,
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
    stored = results.get("dts_changes", {})
    if stored.get("write_seconds"):
        # the five upserts of the changes phase, each commit looking up its old values
        upserted = args.rows  # BATCHES batches of rows // BATCHES
        rate = upserted / stored["write_seconds"]
        delta = results.get("delta_write", {}).get("rows_per_s")
        targets["upserts with stored changelog vs deltalake merge"] = (
            rate / delta if delta else None,
            None,
        )
    vectored = results.get("dts_read_dv", {})
    if stored.get("write_seconds") and vectored.get("write_seconds"):
        targets["upserts with deletion vectors vs without (stored changelog both)"] = (
            stored["write_seconds"] / vectored["write_seconds"],
            None,
        )
    ratios = RichTable(title="ratios (this project / peer, by rows/s)")
    for c in ("comparison", "ratio", "target met"):
        ratios.add_column(c)
    summary: dict[str, Any] = {}
    for label, (value, target) in targets.items():
        met = "" if target is None or value is None else ("yes" if value >= target else "NO")
        ratios.add_row(label, "n/a" if value is None else f"{value:.2f}x", met)
        summary[label] = {"ratio": value, "target": target}
    mem = results.get("dts_memory", {})
    if "peak_rss_bytes" in mem:
        ok = mem["peak_rss_bytes"] < 2 * GIB
        ratios.add_row(
            f"memory: {args.memory_rows:,} rows, default write buffer (< 2 GiB)",
            f"{mem['peak_rss_bytes'] / GIB:.2f} GiB",
            "yes" if ok else "NO",
        )
        summary["memory_peak_gib"] = mem["peak_rss_bytes"] / GIB
    console = Console()
    console.print(rates)
    console.print(ratios)
    return summary
