"""Peer benchmark: this FileStore vs pypaimon, pypaimon-rust, deltalake and raw pyarrow,
same data, same run.

    python -m bench.bench_peers --rows 1000000 --out bench/results/peers.json

Phases (each measured in its own subprocess, so peak RSS = that phase's ru_maxrss; each
write phase first writes 1,000 rows into a throwaway table, so the timed write measures
throughput rather than one-time start-up):
- write: upsert of N rows into a 4-bucket primary-key table (this project's TableWrite,
  zstd by default, and with snappy, deltalake's codec;
  pypaimon ``write_arrow`` on a primary-key table; pypaimon-rust, Apache Paimon's Rust
  core, its batch write builder's ``write_arrow`` + commit on a table made by its
  ``SQLContext`` DDL; deltalake ``merge`` upsert; raw ``pyarrow.parquet.write_table`` as
  the ceiling);
- read: full merge-read after the N rows plus 5 overlapping upsert batches of N/5 rows
  (half updates, half new keys), each system reading what it wrote (pypaimon-rust: read
  builder, scan plan, ``read`` of the splits; it never compacts, so it merges six sorted
  runs per bucket, as this project's read does with auto-compaction off);
  raw = ``read_table`` of the same number of rows;
  ``dts_read_dv``: the same table with ``deletion-vectors.enabled`` (no merge on read;
  ``write_seconds`` is what the five upserts, vectors included, cost; deltalake's and
  pypaimon-rust's read phases time their five upserts the same way). Every merge-read
  must return the input's rows (the last write of each key) and ``sum(amount)``: a run
  that does not exits non-zero;
- changes (this project): ``Table.changes()`` between the first and the last snapshot,
  read from the changelog every commit stored (changelog-producer=auto, the default;
  ``write_seconds`` is what the five upsert commits, lookups included, cost), computed
  by diff (changelog-producer=none) and read from the changelog stored by lookup
  compactions (changelog-producer=lookup; ``write_seconds`` is what writing with a
  lookup compaction after every commit cost);
- compact (this project): full compaction of the read table;
- memory (this project): ``--memory-rows`` rows through one TableWrite with the default
  write buffer; peak RSS must stay under 2 GiB (the rate counts time in TableWrite only,
  not generating the chunks).

``--repeat N`` runs every phase N times (pypaimon and memory once) and keeps the fastest:
on a loaded machine a single run mostly measures the neighbours. ``--readme PATH``
regenerates that README's bench_peers section (``make bench`` passes bench/README.md).

Peers run in their own virtual environment, bench/.venv-peers (pypaimon pins pyarrow<20;
pypaimon-rust runs on it too), created with pip on first use. The peers' phases live in
bench/peers_systems.py. The data is generated once as Parquet in a temp directory that
both interpreters read. Only the standard library is imported at module level, so this
file runs in the peers' interpreter too.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.peers_data import (
    BATCHES,
    BUCKETS,
    Stopwatch,
    batches,
    expected,
    generate,
    load,
    read_result,
    timed_read,
    warmup,
)
from bench.peers_report import BEGIN, END, best_of, check, markdown, report
from bench.peers_systems import PEER_PHASES
from bench.results import replace_section

HERE = Path(__file__).resolve().parent
PEERS_VENV = HERE / ".venv-peers"
# pypaimon pins pyarrow<20; pypaimon-rust declares no pyarrow requirement and runs on
# that one, so one venv holds all three. >= 0.4: the first with a batch write builder
PEER_PACKAGES = ["pypaimon", "pypaimon-rust>=0.4", "deltalake", "pyarrow<20"]
PEER_DISTRIBUTIONS = ["pypaimon", "pypaimon-rust", "deltalake", "pyarrow"]


# -- phases (run in a child process each) ---------------------------------------
def _dts_table(
    work: Path,
    auto_compaction: bool = True,
    compression: str | None = None,
    changelog_producer: str | None = None,
    deletion_vectors: bool = False,
) -> Any:
    import pyarrow as pa

    from filestore import Catalog

    schema = pa.schema(
        [("id", pa.int64()), ("amount", pa.float64()), ("qty", pa.int64()), ("name", pa.string())]
    )
    options = {"bucket": str(BUCKETS), "auto-compaction": str(auto_compaction).lower()}
    if compression is not None:
        options["file.compression"] = compression
    if changelog_producer is not None:
        options["changelog-producer"] = changelog_producer
    if deletion_vectors:
        options["deletion-vectors.enabled"] = "true"
    return Catalog(str(work)).create_table("bench.t", schema, primary_key=["id"], options=options)


def _dts_write_all(t: Any, tables: list[Any]) -> list[int]:
    w = t.new_write("bench")
    snaps = []
    for data in tables:
        for batch in data.to_batches(max_chunksize=100_000):
            w.write(batch)
        snaps.append(w.commit().id)
    w.close()
    return snaps


def phase_dts_write(data: Path, work: Path) -> dict[str, Any]:
    base = load(data, "base.parquet")
    warmup(base, work, lambda d, w: _dts_write_all(_dts_table(w), [d]))
    t = _dts_table(work)
    watch = Stopwatch()
    _dts_write_all(t, [base])
    return {**watch.elapsed(), "rows": base.num_rows}


def phase_dts_write_snappy(data: Path, work: Path) -> dict[str, Any]:
    # deltalake writes snappy; this project's default is zstd (smaller files)
    base = load(data, "base.parquet")
    warmup(base, work, lambda d, w: _dts_write_all(_dts_table(w, compression="snappy"), [d]))
    t = _dts_table(work, compression="snappy")
    watch = Stopwatch()
    _dts_write_all(t, [base])
    return {**watch.elapsed(), "rows": base.num_rows}


def _dts_merge_setup(
    data: Path, work: Path, changelog_producer: str | None = None
) -> tuple[Any, list[int]]:
    # auto-compaction off: the read must merge six overlapping sorted runs per bucket
    t = _dts_table(work, auto_compaction=False, changelog_producer=changelog_producer)
    snaps = _dts_write_all(t, [load(data, "base.parquet"), *batches(data)])
    return t, snaps


def phase_dts_read(data: Path, work: Path) -> dict[str, Any]:
    t, _ = _dts_merge_setup(data, work)
    elapsed, first, result = timed_read(t.read)
    return {**elapsed, "first_seconds": first, **read_result(result)}


def phase_dts_read_dv(data: Path, work: Path) -> dict[str, Any]:
    # deletion vectors: the upserts mark the rows they replace; the read merges nothing
    t = _dts_table(work, auto_compaction=False, deletion_vectors=True)
    _dts_write_all(t, [load(data, "base.parquet")])
    watch = Stopwatch()  # the five upserts, compared with the peers' (peers_data.upsert_seconds)
    _dts_write_all(t, batches(data))
    writing = watch.elapsed()["seconds"]
    elapsed, first, result = timed_read(t.read)
    return {
        **elapsed,
        "first_seconds": first,
        **read_result(result),
        "write_seconds": writing,
    }


def phase_dts_changes(data: Path, work: Path) -> dict[str, Any]:
    # the default (changelog-producer=auto): every upsert commit stored its changes
    t = _dts_table(work, auto_compaction=False)
    first = _dts_write_all(t, [load(data, "base.parquet")])
    watch = Stopwatch()  # the five upserts, compared with the peers' (peers_data.upsert_seconds)
    snaps = first + _dts_write_all(t, batches(data))
    writing = watch.elapsed()["seconds"]
    started = time.perf_counter()
    rows = t.changes(snaps[0], snaps[-1]).num_rows
    return {"seconds": time.perf_counter() - started, "rows": rows, "write_seconds": writing}


def phase_dts_changes_diff(data: Path, work: Path) -> dict[str, Any]:
    t, snaps = _dts_merge_setup(data, work, changelog_producer="none")
    started = time.perf_counter()
    rows = t.changes(snaps[0], snaps[-1]).num_rows
    return {"seconds": time.perf_counter() - started, "rows": rows}


def phase_dts_changes_lookup(data: Path, work: Path) -> dict[str, Any]:
    # changelog-producer=lookup: each upsert batch is followed by its lookup compaction,
    # which stores the changelog; changes() then reads the stored files
    from filestore import Catalog

    base = load(data, "base.parquet")
    options = {"bucket": str(BUCKETS), "changelog-producer": "lookup"}
    t = Catalog(str(work)).create_table("bench.t", base.schema, primary_key=["id"], options=options)
    started = time.perf_counter()
    _dts_write_all(t, [base, *batches(data)])
    writing = time.perf_counter() - started
    snaps = [s.id for s in t.snapshots()]
    started = time.perf_counter()
    rows = t.changes(snaps[0], snaps[-1]).num_rows
    return {"seconds": time.perf_counter() - started, "rows": rows, "write_seconds": writing}


def phase_dts_compact(data: Path, work: Path) -> dict[str, Any]:
    t, _ = _dts_merge_setup(data, work)
    started = time.perf_counter()
    result = t.compact(full=True)
    return {
        "seconds": time.perf_counter() - started,
        "rows": result.rows_before,
        "rows_after": result.rows_after,
        "files": [result.files_before, result.files_after],
    }


def phase_dts_memory(data: Path, work: Path, memory_rows: int) -> dict[str, Any]:
    import numpy as np
    import pyarrow as pa

    t = _dts_table(work)
    w = t.new_write("bench")
    chunk = 500_000
    writing = 0.0  # time in TableWrite only: generating the chunks is not the store's cost
    for start in range(0, memory_rows, chunk):
        n = min(chunk, memory_rows - start)
        keys = np.arange(start, start + n, dtype=np.int64)
        data = pa.table(
            {
                "id": keys,
                "amount": np.random.default_rng(start).random(n),
                "qty": keys % 1000,
                "name": pa.array(np.char.add("customer-", (keys % 10_000).astype(str))),
            }
        )
        started = time.perf_counter()
        w.write(data)
        writing += time.perf_counter() - started
    started = time.perf_counter()
    w.commit()
    w.close()
    return {"seconds": writing + time.perf_counter() - started, "rows": memory_rows}


def phase_raw_write(data: Path, work: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    base = load(data, "base.parquet")
    warmup(base, work, lambda d, w: pq.write_table(d, w / "raw.parquet", compression="zstd"))
    watch = Stopwatch()
    pq.write_table(base, work / "raw.parquet", compression="zstd")
    return {**watch.elapsed(), "rows": base.num_rows}


def phase_raw_read(data: Path, work: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    # the same number of rows the merge-read returns: base + the new keys of 5 batches
    tables = [load(data, "base.parquet"), *batches(data)]
    merged_rows = tables[0].num_rows + sum(b.num_rows - b.num_rows // 2 for b in tables[1:])
    import pyarrow as pa

    pq.write_table(
        pa.concat_tables(tables).slice(0, merged_rows), work / "raw.parquet", compression="zstd"
    )
    elapsed, first, result = timed_read(lambda: pq.read_table(work / "raw.parquet"))
    return {**elapsed, "first_seconds": first, "rows": result.num_rows}


PHASES = {
    "dts_write": phase_dts_write,
    "dts_write_snappy": phase_dts_write_snappy,
    "dts_read": phase_dts_read,
    "dts_read_dv": phase_dts_read_dv,
    "dts_changes": phase_dts_changes,
    "dts_changes_diff": phase_dts_changes_diff,
    "dts_changes_lookup": phase_dts_changes_lookup,
    "dts_compact": phase_dts_compact,
    "raw_write": phase_raw_write,
    "raw_read": phase_raw_read,
    **PEER_PHASES,
}
# pypaimon is over 10x slower than the rest: one run of it is enough to compare against
ONCE = {"paimon_write", "paimon_read", "dts_memory"}


def run_phase(name: str, data: Path, memory_rows: int) -> None:
    """Child process entry: run one phase, print one JSON line with peak RSS."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    try:
        if name == "dts_memory":
            out = phase_dts_memory(data, work, memory_rows)
        else:
            out = PHASES[name](data, work)
        if "_write" in name:
            out["parquet_bytes"] = sum(
                f.stat().st_size
                for f in work.rglob("*.parquet")
                if "warmup" not in f.relative_to(work).parts
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print("RESULT " + json.dumps(out), flush=True)


# -- parent ---------------------------------------------------------------------
def peers_ready() -> bool:
    """Whether the peers' venv exists and imports every peer."""
    python = PEERS_VENV / "bin" / "python"
    modules = ", ".join(d.replace("-", "_") for d in PEER_DISTRIBUTIONS)
    probe = [str(python), "-c", f"import {modules}"]
    return python.exists() and subprocess.call(probe, stderr=subprocess.DEVNULL) == 0


def ensure_peers_venv() -> Path | None:
    python = PEERS_VENV / "bin" / "python"
    if peers_ready():
        return python
    print(f"creating the peers' venv at {PEERS_VENV} ({', '.join(PEER_PACKAGES)}) ...", flush=True)
    try:
        if not python.exists():
            subprocess.check_call([sys.executable, "-m", "venv", str(PEERS_VENV)])
        subprocess.check_call([str(python), "-m", "pip", "install", *PEER_PACKAGES])
    except subprocess.CalledProcessError as e:
        print(f"could not set up the peers' venv ({e}); peers are skipped", flush=True)
        return None
    return python


def versions(python: str, packages: list[str]) -> dict[str, str]:
    """The installed versions of ``packages`` in that interpreter (for the report)."""
    code = (
        "import importlib.metadata as m, json, sys; "
        "print(json.dumps({p: m.version(p) for p in sys.argv[1:]}))"
    )
    proc = subprocess.run([python, "-c", code, *packages], capture_output=True, text=True)
    found: dict[str, str] = json.loads(proc.stdout) if proc.returncode == 0 else {}
    return found


def commit() -> str:
    proc = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE
    )
    return proc.stdout.strip() if proc.returncode == 0 else "unknown"


def child(python: str, name: str, data: Path, memory_rows: int) -> dict[str, Any]:
    cmd = [python, str(Path(__file__).resolve()), "--phase", name, "--data", str(data)]
    cmd += ["--memory-rows", str(memory_rows)]
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=HERE.parent)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        print(f"  {name}: FAILED ({' | '.join(tail)})", flush=True)
        return {"error": "\n".join(tail)}
    out: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    out["rows_per_s"] = out["rows"] / out["seconds"] if out["seconds"] else None
    print(
        f"  {name}: {out['rows']:,} rows in {out['seconds']:.2f}s "
        f"({out['rows_per_s']:,.0f} rows/s), peak RSS {out['peak_rss_bytes'] / 2**20:,.0f} MiB "
        f"[{time.perf_counter() - started:.0f}s with setup]",
        flush=True,
    )
    return out


ORDER = ["raw_write", "dts_write", "dts_write_snappy", "paimon_write", "paimon_rust_write"]
ORDER += ["delta_write", "raw_read", "dts_read", "dts_read_dv", "paimon_read"]
ORDER += ["paimon_rust_read", "delta_read", "dts_changes", "dts_changes_diff"]
ORDER += ["dts_changes_lookup", "dts_compact", "dts_memory"]


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--memory-rows", type=int, default=10_000_000)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "peers.json")
    parser.add_argument("--readme", type=Path, help="regenerate this README's bench_peers section")
    parser.add_argument("--skip-peers", action="store_true", help="Only this project and raw.")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per phase (pypaimon: 1); the fastest counts"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="PHASE",
        help="run only these phases (e.g. dts_write delta_write)",
    )
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        run_phase(args.phase, args.data, args.memory_rows)
        return
    order = ORDER
    if args.only:
        unknown = set(args.only) - set(order)
        if unknown:
            parser.error(f"unknown phase(s) {sorted(unknown)}; phases are {order}")
        order = [name for name in order if name in args.only]
    run_peers = not args.skip_peers and any(name in PEER_PHASES for name in order)
    peers_python = ensure_peers_venv() if run_peers else None
    load_before = os.getloadavg()[0]
    data = Path(tempfile.mkdtemp(prefix="bench-peers-data-"))
    results: dict[str, Any] = {}
    want: tuple[int, float] | None = None
    try:
        print(f"generating {args.rows:,} rows + {BATCHES} upsert batches in {data}", flush=True)
        generate(data, args.rows)
        want = expected(data)
        for i, name in enumerate(order, 1):
            peer = name in PEER_PHASES
            if peer and peers_python is None:
                continue
            print(f"[{i}/{len(order)}] {name}", flush=True)
            python = str(peers_python) if peer else sys.executable
            rounds = 1 if name in ONCE else args.repeat
            runs = [child(python, name, data, args.memory_rows) for _ in range(rounds)]
            results[name] = best_of(runs)
    except KeyboardInterrupt:
        print("interrupted; writing what was measured", flush=True)
    finally:
        shutil.rmtree(data, ignore_errors=True)
    problems = check(results, want)
    summary = report(results, args, problems)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"rows": args.rows, "memory_rows": args.memory_rows, "buckets": BUCKETS}
    doc["repeat"] = args.repeat
    doc["finished"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    doc["argv"] = sys.argv[1:]
    doc["load"] = {"before": load_before, "after": os.getloadavg()[0], "cores": os.cpu_count()}
    doc["versions"] = {"dts": {"commit": commit(), **versions(sys.executable, ["pyarrow"])}}
    if peers_python is not None:
        doc["versions"]["peers"] = versions(str(peers_python), PEER_DISTRIBUTIONS)
    if want is not None:
        doc["expected"] = {"rows": want[0], "amount_sum": want[1]}
    doc |= {"problems": problems, "results": results, "summary": summary}
    args.out.write_text(json.dumps(doc, indent=2))
    print(f"results written to {args.out}")
    if args.readme is not None:
        replace_section(args.readme, BEGIN, END, markdown(doc))
        print(f"updated {args.readme}")
    if problems:
        sys.exit("reads disagree with the input: " + "; ".join(problems))


if __name__ == "__main__":
    main()
