"""Peer benchmark: this FileStore vs pypaimon vs deltalake vs raw pyarrow, same data, same run.

    python -m bench.bench_peers --rows 1000000 --out bench/results/peers.json

Phases (each measured in its own subprocess, so peak RSS = that phase's ru_maxrss; each
write phase first writes 1,000 rows into a throwaway table, so the timed write measures
throughput rather than one-time start-up):
- write: upsert of N rows into a 4-bucket primary-key table (this project's TableWrite,
  zstd by default, and with snappy, deltalake's codec;
  pypaimon ``write_arrow`` on a primary-key table; deltalake ``merge`` upsert; raw
  ``pyarrow.parquet.write_table`` as the ceiling);
- read: full merge-read after the N rows plus 5 overlapping upsert batches of N/5 rows
  (half updates, half new keys); raw = ``read_table`` of the same number of rows;
  ``dts_read_dv``: the same table with ``deletion-vectors.enabled`` (no merge on read;
  ``write_seconds`` is what the five upserts, vectors included, cost);
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
on a loaded machine a single run mostly measures the neighbours.

Peers run in their own virtual environment, bench/.venv-peers (pypaimon pins pyarrow<20),
created with pip on first use. The data is generated once as Parquet in a temp directory
that both interpreters read. Only the standard library is imported at module level, so
this file runs in the peers' interpreter too.
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

from bench.peers_data import BATCHES, BUCKETS, batches, generate, load
from bench.peers_report import best_of, report

HERE = Path(__file__).resolve().parent
PEERS_VENV = HERE / ".venv-peers"
PEER_PACKAGES = ["pypaimon", "deltalake", "pyarrow<20"]


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


WARMUP_ROWS = 1_000


def _warmup(data: Any, work: Path, write: Any) -> None:
    """One small write into a throwaway table first, for every system alike: the timed
    write then measures throughput, not one-time start-up (lazy imports, first calls)."""
    (work / "warmup").mkdir()
    write(data.slice(0, WARMUP_ROWS), work / "warmup")


def phase_dts_write(data: Path, work: Path) -> dict[str, Any]:
    base = load(data, "base.parquet")
    _warmup(base, work, lambda d, w: _dts_write_all(_dts_table(w), [d]))
    t = _dts_table(work)
    started = time.perf_counter()
    _dts_write_all(t, [base])
    return {"seconds": time.perf_counter() - started, "rows": base.num_rows}


def phase_dts_write_snappy(data: Path, work: Path) -> dict[str, Any]:
    # deltalake writes snappy; this project's default is zstd (smaller files)
    base = load(data, "base.parquet")
    _warmup(base, work, lambda d, w: _dts_write_all(_dts_table(w, compression="snappy"), [d]))
    t = _dts_table(work, compression="snappy")
    started = time.perf_counter()
    _dts_write_all(t, [base])
    return {"seconds": time.perf_counter() - started, "rows": base.num_rows}


def _dts_merge_setup(
    data: Path, work: Path, changelog_producer: str | None = None
) -> tuple[Any, list[int]]:
    # auto-compaction off: the read must merge six overlapping sorted runs per bucket
    t = _dts_table(work, auto_compaction=False, changelog_producer=changelog_producer)
    snaps = _dts_write_all(t, [load(data, "base.parquet"), *batches(data)])
    return t, snaps


def phase_dts_read(data: Path, work: Path) -> dict[str, Any]:
    t, _ = _dts_merge_setup(data, work)
    started = time.perf_counter()
    rows = t.read().num_rows
    return {"seconds": time.perf_counter() - started, "rows": rows}


def phase_dts_read_dv(data: Path, work: Path) -> dict[str, Any]:
    # deletion vectors: the upserts mark the rows they replace; the read merges nothing
    t = _dts_table(work, auto_compaction=False, deletion_vectors=True)
    first = _dts_write_all(t, [load(data, "base.parquet")])
    started = time.perf_counter()
    _dts_write_all(t, batches(data))
    writing = time.perf_counter() - started
    assert first
    started = time.perf_counter()
    rows = t.read().num_rows
    return {"seconds": time.perf_counter() - started, "rows": rows, "write_seconds": writing}


def phase_dts_changes(data: Path, work: Path) -> dict[str, Any]:
    # the default (changelog-producer=auto): every upsert commit stored its changes
    t = _dts_table(work, auto_compaction=False)
    first = _dts_write_all(t, [load(data, "base.parquet")])
    started = time.perf_counter()
    snaps = first + _dts_write_all(t, batches(data))
    writing = time.perf_counter() - started
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
    _warmup(base, work, lambda d, w: pq.write_table(d, w / "raw.parquet", compression="zstd"))
    started = time.perf_counter()
    pq.write_table(base, work / "raw.parquet", compression="zstd")
    return {"seconds": time.perf_counter() - started, "rows": base.num_rows}


def phase_raw_read(data: Path, work: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    # the same number of rows the merge-read returns: base + the new keys of 5 batches
    tables = [load(data, "base.parquet"), *batches(data)]
    merged_rows = tables[0].num_rows + sum(b.num_rows - b.num_rows // 2 for b in tables[1:])
    import pyarrow as pa

    pq.write_table(
        pa.concat_tables(tables).slice(0, merged_rows), work / "raw.parquet", compression="zstd"
    )
    started = time.perf_counter()
    rows = pq.read_table(work / "raw.parquet").num_rows
    return {"seconds": time.perf_counter() - started, "rows": rows}


def _paimon_table(work: Path) -> Any:
    import pyarrow as pa
    from pypaimon import CatalogFactory, Schema

    catalog = CatalogFactory.create({"warehouse": str(work / "paimon")})
    catalog.create_database("bench", True)
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("amount", pa.float64()),
            ("qty", pa.int64()),
            ("name", pa.string()),
        ]
    )
    catalog.create_table(
        "bench.t",
        Schema.from_pyarrow_schema(schema, primary_keys=["id"], options={"bucket": str(BUCKETS)}),
        True,
    )
    return catalog.get_table("bench.t"), schema


def _paimon_write(table: Any, schema: Any, data: Any) -> None:
    builder = table.new_batch_write_builder()
    write, commit = builder.new_write(), builder.new_commit()
    write.write_arrow(data.cast(schema))
    commit.commit(write.prepare_commit())
    write.close()
    commit.close()


def phase_paimon_write(data: Path, work: Path) -> dict[str, Any]:
    base = load(data, "base.parquet")

    def paimon_once(d: Any, w: Path) -> None:
        table, schema = _paimon_table(w)
        _paimon_write(table, schema, d)

    _warmup(base, work, paimon_once)
    table, schema = _paimon_table(work)
    started = time.perf_counter()
    _paimon_write(table, schema, base)
    return {"seconds": time.perf_counter() - started, "rows": base.num_rows}


def phase_paimon_read(data: Path, work: Path) -> dict[str, Any]:
    table, schema = _paimon_table(work)
    for batch in [load(data, "base.parquet"), *batches(data)]:
        _paimon_write(table, schema, batch)
    started = time.perf_counter()
    builder = table.new_read_builder()
    splits = builder.new_scan().plan().splits()
    rows = builder.new_read().to_arrow(splits).num_rows
    return {"seconds": time.perf_counter() - started, "rows": rows}


def _delta_merge(path: str, data: Any) -> None:
    from deltalake import DeltaTable

    (
        DeltaTable(path)
        .merge(source=data, predicate="t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def _delta_create(work: Path, schema: Any) -> str:
    from deltalake import write_deltalake

    path = str(work / "delta")
    write_deltalake(path, schema.empty_table())
    return path


def phase_delta_write(data: Path, work: Path) -> dict[str, Any]:
    base = load(data, "base.parquet")
    _warmup(base, work, lambda d, w: _delta_merge(_delta_create(w, d.schema), d))
    path = _delta_create(work, base.schema)
    started = time.perf_counter()
    _delta_merge(path, base)
    return {"seconds": time.perf_counter() - started, "rows": base.num_rows}


def phase_delta_read(data: Path, work: Path) -> dict[str, Any]:
    from deltalake import DeltaTable

    base = load(data, "base.parquet")
    path = _delta_create(work, base.schema)
    for batch in [base, *batches(data)]:
        _delta_merge(path, batch)
    started = time.perf_counter()
    rows = DeltaTable(path).to_pyarrow_table().num_rows
    return {"seconds": time.perf_counter() - started, "rows": rows}


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
    "paimon_write": phase_paimon_write,
    "paimon_read": phase_paimon_read,
    "delta_write": phase_delta_write,
    "delta_read": phase_delta_read,
}
PEER_PHASES = {"paimon_write", "paimon_read", "delta_write", "delta_read"}


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
def ensure_peers_venv() -> Path | None:
    python = PEERS_VENV / "bin" / "python"
    probe = [str(python), "-c", "import pypaimon, deltalake, pyarrow"]
    if python.exists() and subprocess.call(probe, stderr=subprocess.DEVNULL) == 0:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--memory-rows", type=int, default=10_000_000)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "peers.json")
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
    peers_python = None if args.skip_peers else ensure_peers_venv()
    data = Path(tempfile.mkdtemp(prefix="bench-peers-data-"))
    results: dict[str, Any] = {}
    try:
        print(f"generating {args.rows:,} rows + {BATCHES} upsert batches in {data}", flush=True)
        generate(data, args.rows)
        order = ["raw_write", "dts_write", "dts_write_snappy", "paimon_write", "delta_write"]
        order += ["raw_read", "dts_read", "dts_read_dv"]
        order += [
            "paimon_read",
            "delta_read",
            "dts_changes",
            "dts_changes_diff",
            "dts_changes_lookup",
        ]
        order += ["dts_compact"]
        order += ["dts_memory"]
        if args.only:
            unknown = set(args.only) - set(order)
            if unknown:
                parser.error(f"unknown phase(s) {sorted(unknown)}; phases are {order}")
            order = [name for name in order if name in args.only]
        for i, name in enumerate(order, 1):
            peer = name in PEER_PHASES
            if peer and peers_python is None:
                continue
            print(f"[{i}/{len(order)}] {name}", flush=True)
            python = str(peers_python) if peer else sys.executable
            # pypaimon is ~30x slower: one run is enough to compare against it
            rounds = 1 if name.startswith("paimon") or name == "dts_memory" else args.repeat
            runs = [child(python, name, data, args.memory_rows) for _ in range(rounds)]
            results[name] = best_of(runs)
    except KeyboardInterrupt:
        print("interrupted; writing what was measured", flush=True)
    finally:
        shutil.rmtree(data, ignore_errors=True)
    summary = report(results, args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"rows": args.rows, "memory_rows": args.memory_rows, "buckets": BUCKETS}
    doc["repeat"] = args.repeat
    doc |= {"results": results, "summary": summary}
    args.out.write_text(json.dumps(doc, indent=2))
    print(f"results written to {args.out}")


if __name__ == "__main__":
    main()
