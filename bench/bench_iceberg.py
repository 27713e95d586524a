"""Iceberg metadata benchmark (issue 43): what reading a dts table through its Iceberg
metadata costs an engine, and what writing that metadata costs a commit.

    python -m bench.bench_iceberg --rows 1000000 --out bench/results/iceberg.json

Two parts, each against its peer in the same run:
- read: a primary-key table with deletion vectors and Iceberg metadata gets ``--rows``
  rows, then 5 upsert commits (each updates 5% of the keys and deletes 1%). pyiceberg
  gives a table of its own the same history through its own API (the append, then per
  step ``upsert`` and ``delete``, which copy on write), and writes the live rows once more
  in one append (no deletes: the reader's best case). A second dts table takes the same
  history with ``compaction.delete-ratio-threshold=0.2`` (Paimon's default, dts's without
  Iceberg metadata: its files are rewritten only once a fifth of their rows is deleted,
  where the first, at the defaults, gets 0.05). DuckDB reads the four through
  ``iceberg_scan``, in turn on every repeat. Ratio = peer time / dts time; the target
  (>= 0.8) is against the same history with the defaults, the one-append copy and the
  table at 0.2 are further rows, and the five steps' write time is set beside pyiceberg's.
- commit: pairs of tables alike but for ``metadata.iceberg.storage``, ``--commits`` upsert
  commits of ``--commit-rows`` rows each, in turn so the machine's load falls on all; the
  median commit time with the metadata over the one without (<= 1.10 is the target), in
  wall time and in the process's CPU time (steadier on a shared machine). Two pairs: a
  primary-key table (the headline) and one with deletion vectors. No snapshot expires
  during the run: the metadata names every one.

The DuckDB and pyiceberg side runs in the Iceberg readers' environment (``make
iceberg-readers``, ``bench/iceberg_readers_side.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table as RichTable

from bench.bench_filestore import make_rows
from filestore import Catalog, Table
from filestore.format.options import DELETE_RATIO_ICEBERG
from logstore.localhost import cache_dir

HERE = Path(__file__).resolve().parent
READERS_SIDE = HERE / "iceberg_readers_side.py"
ICEBERG = {"metadata.iceberg.storage": "table-location"}


def readers_python() -> Path:
    given = os.environ.get("DTS_ICEBERG_READERS")
    venv = Path(given) if given else cache_dir() / "venv-iceberg-readers-2"
    python = venv / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"no Iceberg readers at {venv}: run `make iceberg-readers`")
    return python


def _commit(table: Table, rows: pa.Table) -> float:
    """Seconds to write and commit ``rows`` (the write's flush included)."""
    started = time.perf_counter()
    w = table.new_write("bench")
    try:
        w.write(rows)
        w.commit()
    finally:
        w.close()
    return time.perf_counter() - started


def upserts(rows: pa.Table, step: int) -> pa.Table:
    """5% of the keys with new values and 1% deleted (``_row_kind`` -D)."""
    rng = np.random.default_rng(100 + step)
    ids = rows.column("id").to_numpy()
    n = len(ids)
    updated = rng.choice(ids, n // 20, replace=False)
    deleted = np.setdiff1d(rng.choice(ids, n // 100, replace=False), updated)
    picked = pa.array(np.concatenate([updated, deleted]))
    batch = rows.filter(pc.is_in(rows.column("id"), value_set=picked))
    amount = np.random.default_rng(step).random(batch.num_rows)
    batch = batch.set_column(batch.schema.get_field_index("amount"), "amount", pa.array(amount))
    kinds = np.where(np.isin(batch.column("id").to_numpy(), deleted), "-D", "+U")
    return batch.append_column("_row_kind", pa.array(kinds.tolist()))


#: the read part's dts tables: the defaults (a table with Iceberg metadata rewrites an
#: upper file once a twentieth of its rows is deleted: DuckDB applies position deletes
#: row by row to every row of a file that has any), and one at Paimon's default of a fifth
#: (fewer rewrites, slower reads), the trade-off's other side
READ_TABLES = {
    "dts": {},
    "dts_ratio_0_2": {"compaction.delete-ratio-threshold": "0.2"},
}


def read_part(work: Path, rows: int, repeats: int, console: Console) -> dict[str, Any]:
    catalog = Catalog(str(work / "wh"))
    data = make_rows(rows, 0, seed=1)
    options = {**ICEBERG, "deletion-vectors.enabled": "true", "bucket": "4"}
    tables = {
        name: catalog.create_table(f"bench.{name}", data.schema, ["id"], options=options | extra)
        for name, extra in READ_TABLES.items()
    }
    console.print(f"read part: {rows:,} rows, then 5 upsert commits with deletes")
    for table in tables.values():
        _commit(table, data)
    pq.write_table(data, work / "initial.parquet")
    steps, step_seconds = [], {name: 0.0 for name in tables}
    for step in range(5):
        batch = upserts(data, step)
        for name, table in tables.items():
            step_seconds[name] += _commit(table, batch)
        # the same step for pyiceberg: its upsert of the updated rows, its delete of the ids
        deleted = pc.equal(batch.column("_row_kind"), "-D")
        paths = {
            "upsert": str(work / f"upsert-{step}.parquet"),
            "delete": str(work / f"delete-{step}.parquet"),
        }
        pq.write_table(
            batch.filter(pc.invert(deleted)).drop_columns(["_row_kind"]), paths["upsert"]
        )
        pq.write_table(batch.filter(deleted).select(["id"]), paths["delete"])
        steps.append(paths)
    live = tables["dts"].read()
    pq.write_table(live, work / "live.parquet")
    request = {
        "dts_tables": {name: t.paths.root for name, t in tables.items()},
        "initial": str(work / "initial.parquet"),
        "steps": steps,
        "live_rows": str(work / "live.parquet"),
        "copy_dir": str(work / "copy"),
        "repeats": repeats,
    }
    console.print(
        f"pyiceberg writes the same history and a one-append copy; DuckDB reads the "
        f"{len(tables) + 2} tables, {repeats} times in turn (readers' environment)"
    )
    done = subprocess.run(
        [str(readers_python()), str(READERS_SIDE)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode != 0:
        raise SystemExit(f"the readers' side failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    _same_rows(result["seen"], live)
    result["live_rows"] = live.num_rows
    result["dts_files"] = {name: _dts_files(t) for name, t in tables.items()}
    result["step_seconds"] = step_seconds
    return result


def _same_rows(seen: dict[str, dict[str, list[Any]]], live: pa.Table) -> None:
    """Every source read dts's live rows: their count, and the sum and max of the
    aggregate (float sums in another order differ in the last digits only)."""
    total, top = pc.sum(live.column("amount")).as_py(), pc.max(live.column("qty")).as_py()
    for name, values in seen["full"].items():
        if values != [live.num_rows]:
            raise SystemExit(f"SELECT * from {name}: {values[0]} rows, dts reads {live.num_rows}")
    for name, (count, amount, most) in seen["aggregate"].items():
        if count != live.num_rows or most != top or abs(amount - total) > 1e-6 * abs(total):
            raise SystemExit(f"aggregate of {name}: {count, amount, most}, dts: {total, top}")


def _dts_files(table: Table) -> dict[str, int]:
    """What DuckDB reads of the dts table: data files, and those with position deletes."""
    entries = table.live_entries(table.snapshot_manager.latest())
    with_deletes = sum(1 for e in entries if e.file.deletion_vector or e.file.delete_row_count)
    return {"data_files": len(entries), "with_deletes": with_deletes}


#: the commit part's tables: the headline (a primary-key table as the worker writes it,
#: whose Iceberg view shows the buckets that need no merge) and one with deletion vectors
#: (every live row shown: the sync also writes the position deletes of each grown vector).
#: Both of a pair rewrite files at the same delete ratio (the one Iceberg metadata brings),
#: so the pair differs by the metadata's writing alone; the read part shows the ratio's cost
COMMIT_KINDS: dict[str, dict[str, str]] = {
    "primary_key": {},
    "deletion_vectors": {
        "deletion-vectors.enabled": "true",
        "compaction.delete-ratio-threshold": str(DELETE_RATIO_ICEBERG),
    },
}


def commit_part(work: Path, commits: int, commit_rows: int, console: Console) -> dict[str, Any]:
    catalog = Catalog(str(work / "wh-commits"))
    base = make_rows(100_000, 0, seed=2)
    tables: dict[tuple[str, str], Table] = {}
    for kind, options in COMMIT_KINDS.items():
        for side, extra in (("iceberg", ICEBERG), ("plain", {})):
            name = f"bench.{kind}_{side}"
            tables[(kind, side)] = catalog.create_table(
                name, base.schema, ["id"], options={**options, **extra}
            )
    for table in tables.values():
        table.set_options({"snapshot.time-retained": "1 d"})  # nothing expires in the run
        _commit(table, base)
    wall: dict[str, dict[str, list[float]]] = {
        k: {"iceberg": [], "plain": []} for k in COMMIT_KINDS
    }
    cpu: dict[str, dict[str, list[float]]] = {k: {"iceberg": [], "plain": []} for k in COMMIT_KINDS}
    console.print(f"commit part: {commits} commits of {commit_rows:,} rows per table, in turn")
    keys = list(tables)
    for i in range(commits):
        batch = make_rows(commit_rows, (i * commit_rows) % 90_000, seed=10 + i)
        # every table goes first as often as the others: a slow moment falls on all
        for kind, side in keys[i % len(keys) :] + keys[: i % len(keys)]:
            started = time.process_time()
            wall[kind][side].append(_commit(tables[(kind, side)], batch))
            cpu[kind][side].append(time.process_time() - started)
    snapshots = {k: len(tables[(k, "iceberg")].snapshots()) for k in COMMIT_KINDS}
    return {"times": wall, "cpu_times": cpu, "snapshots": snapshots}


def _threshold() -> str:
    return READ_TABLES["dts_ratio_0_2"]["compaction.delete-ratio-threshold"]


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.1f}"


def report(
    read: dict[str, Any] | None, commit: dict[str, Any] | None, console: Console
) -> dict[str, Any]:
    out = RichTable(title=f"Iceberg metadata (load average {os.getloadavg()[0]:.2f})")
    for col in ("measure", "dts", "peer", "peer", "ratio", "target"):
        out.add_column(col)
    ratios = {}
    peers = {
        "pyiceberg_history": "pyiceberg, the same history (copy on write)",
        "pyiceberg_one_append": "pyiceberg, the live rows in one append (best case)",
    }
    for query, times in read["times"].items() if read else ():
        for peer, label in peers.items():
            ratio = statistics.median(times[peer]) / statistics.median(times["dts"])
            ratios[f"read_{query}_vs_{peer.removeprefix('pyiceberg_')}"] = ratio
            out.add_row(
                f"DuckDB {query} read, median ms",
                _ms(times["dts"]),
                label,
                _ms(times[peer]),
                f"{ratio:.2f}x",
                ">= 0.80x" if peer == "pyiceberg_history" else "(second row)",
            )
        other = statistics.median(times["pyiceberg_history"]) / statistics.median(
            times["dts_ratio_0_2"]
        )
        ratios[f"read_{query}_ratio_0_2_vs_history"] = other
        out.add_row(
            f"DuckDB {query} read, median ms, dts with "
            f"compaction.delete-ratio-threshold={_threshold()}",
            _ms(times["dts_ratio_0_2"]),
            peers["pyiceberg_history"],
            _ms(times["pyiceberg_history"]),
            f"{other:.2f}x",
            "(trade-off row)",
        )
    if read:
        spent = read["step_seconds"]
        out.add_row(
            "the five upsert steps, seconds (write and commit)",
            f"{spent['dts']:.2f} (at {_threshold()}: {spent['dts_ratio_0_2']:.2f})",
            "pyiceberg upsert + delete",
            f"{read['pyiceberg_history_seconds']:.2f}",
            f"{read['pyiceberg_history_seconds'] / spent['dts']:.1f}x",
            "",
        )
    for kind in COMMIT_KINDS if commit else ():
        assert commit is not None
        for clock, label in (("times", "wall"), ("cpu_times", "CPU")):
            on, off = commit[clock][kind]["iceberg"], commit[clock][kind]["plain"]
            ratio = statistics.median(on) / statistics.median(off)
            ratios[f"commit_{kind}_{label.lower()}"] = ratio
            added = (statistics.median(on) - statistics.median(off)) * 1000
            out.add_row(
                f"commit ({kind.replace('_', ' ')}) with metadata, median {label} ms "
                f"({commit['snapshots'][kind]} snapshots; {added:+.1f} ms a commit)",
                _ms(on),
                "commit without",
                _ms(off),
                f"{ratio:.2f}x",
                "<= 1.10x" if kind == "primary_key" and label == "wall" else "",
            )
    console.print(out)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--commits", type=int, default=100)
    # a 1 s barrier's worth of changes at 10k changes/s: what the worker commits
    parser.add_argument("--commit-rows", type=int, default=10_000)
    parser.add_argument(
        "--parts", default="read,commit", help="comma-separated: read, commit (both by default)"
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "iceberg.json")
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory(prefix="dts-bench-iceberg-") as tmp:
        console.print(f"working in {tmp}")
        load_before = os.getloadavg()
        parts = args.parts.split(",")
        read = read_part(Path(tmp), args.rows, args.repeats, console) if "read" in parts else None
        commit = (
            commit_part(Path(tmp), args.commits, args.commit_rows, console)
            if "commit" in parts
            else None
        )
        ratios = report(read, commit, console)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "rows": args.rows,
        "read": read,
        "commit": commit,
        "ratios": ratios,
        "load_average": {"before": load_before, "after": os.getloadavg()},
    }
    args.out.write_text(json.dumps(result, indent=2))
    console.print(f"results in {args.out}")


if __name__ == "__main__":
    main()
