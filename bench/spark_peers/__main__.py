"""Spark peers benchmark: dts beside Apache Paimon's and Delta Lake's Spark connectors.

    python -m bench.spark_peers                      # 5M rows + 5 upserts of 1M (make bench-peers)
    python -m bench.spark_peers --rows 200000 --batch-rows 40000 --systems dts delta

Set-up (idempotent, done here so `make bench-peers` works from a clean clone): the jars
are resolved from Maven Central with Maven into the jar cache (`$DTS_CACHE`, by default
~/.cache/dts), never into the repository; Paimon gets its own virtual environment,
bench/.venv-spark-paimon (gitignored), with the PySpark its runtime is built for.

Every system runs in its own subprocess on the same generated Parquet input, with the same
Spark configuration (bench/spark_peers/common.py), and writes JSON; this driver checks the
results against the input (count and sum after the upserts, the key range), prints the
table of rows/s with the ratios dts/Paimon and dts/Delta, writes
bench/results/spark_peers.json and, with --readme, the results section of bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.results import replace_section
from bench.spark_peers.common import CORES, DRIVER_MEMORY, PHASES, SHUFFLE_PARTITIONS
from logstore.localhost import cache_dir

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PAIMON_VERSION = "0.9.0"  # paimon-spark-3.5: the newest Paimon Spark runtime served here
PAIMON_PYSPARK = "3.5.2"  # the Spark paimon-spark-3.5 0.9.0 is built against
DELTA_VERSION = "4.4.0"  # delta-spark_2.13 4.4.0 is built against Spark 4.2.0, dts's PySpark
PAIMON_VENV = HERE.parent / ".venv-spark-paimon"
SYSTEMS = ("dts", "paimon", "delta")
PEERS = ("paimon", "delta")
LABEL = {"dts": "dts", "paimon": "Paimon", "delta": "Delta"}
BEGIN, END = "<!-- spark-peers:begin -->", "<!-- spark-peers:end -->"


def jar_dir(system: str) -> Path | None:
    version = {"paimon": PAIMON_VERSION, "delta": DELTA_VERSION}.get(system)
    return cache_dir() / f"spark-peers-{system}-{version}" if version else None


def python_for(system: str) -> Path:
    return PAIMON_VENV / "bin" / "python" if system == "paimon" else Path(sys.executable)


def ready(system: str) -> bool:
    """The system's interpreter and jars are in place (no set-up needed)."""
    jars = jar_dir(system)
    return python_for(system).is_file() and (jars is None or (jars / ".complete").is_file())


# -- set-up ---------------------------------------------------------------------
def fetch_jars(system: str) -> None:
    where = jar_dir(system)
    assert where is not None
    version = {
        "paimon": f"-Dpaimon.version={PAIMON_VERSION}",
        "delta": f"-Ddelta.version={DELTA_VERSION}",
    }
    resolve_jars(
        HERE / f"{system}.pom.xml", where, [version[system]], f"{system}'s Spark connector"
    )


def resolve_jars(pom: Path, where: Path, defines: list[str], what: str) -> None:
    """The runtime jars of ``pom`` (Maven's copy-dependencies, Maven Central through the
    project's settings) into ``where``, once: a complete directory is left as it is."""
    if (where / ".complete").is_file():
        return
    print(f"set-up: resolving {what} from Maven Central -> {where}", flush=True)
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    subprocess.run(
        [
            "mvn", "-q", "-B", "-s", str(ROOT / "deps" / "maven-settings.xml"),
            "dependency:copy-dependencies", "-DincludeScope=runtime",
            "-f", str(pom), *defines, f"-DoutputDirectory={where}",
        ],
        check=True,
    )  # fmt: skip
    (where / ".complete").touch()  # last: an interrupted download is fetched again


def make_paimon_venv() -> None:
    py = python_for("paimon")
    if py.is_file():
        got = subprocess.run(
            [str(py), "-c", "import pyspark; print(pyspark.__version__)"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        if got == PAIMON_PYSPARK:
            return
    print(f"set-up: {PAIMON_VENV} with pyspark=={PAIMON_PYSPARK} (Paimon's Spark)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(PAIMON_VENV)], check=True)
    pip = [str(py), "-m", "pip", "install", "--progress-bar", "off"]
    subprocess.run([*pip, "--quiet", "--upgrade", "pip"], check=True)
    subprocess.run([*pip, f"pyspark=={PAIMON_PYSPARK}"], check=True)


def set_up(systems: list[str]) -> None:
    if "paimon" in systems:
        make_paimon_venv()
    for system in systems:
        if jar_dir(system) is not None:
            fetch_jars(system)


# -- data -----------------------------------------------------------------------
def generate(
    data: Path, rows: int, batches: int, batch_rows: int, files: int = 4
) -> dict[str, Any]:
    """base/ (rows keys 0..rows-1, shuffled) and upsert-<i>/ (batch_rows each: half updates
    of existing keys, half new keys), `files` Parquet files per directory so Spark reads
    each with parallel tasks; spec.json with the expected results."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    def table(keys: Any, seed: int) -> pa.Table:
        g = np.random.default_rng(seed)
        n = len(keys)
        return pa.table(
            {
                "id": pa.array(keys, pa.int64()),
                "amount": np.round(g.random(n) * 1000, 2),
                "qty": g.integers(0, 1000, n),
                "name": pa.array(np.char.add("customer-", (keys % 10_000).astype(str))),
            }
        )

    def save(t: pa.Table, name: str) -> None:
        (data / name).mkdir(parents=True)
        step = -(-t.num_rows // files)
        for i in range(files):
            pq.write_table(t.slice(i * step, step), data / name / f"part-{i}.parquet")

    rng = np.random.default_rng(1)
    base = table(rng.permutation(rows), 2)
    save(base, "base")
    parts = [base]
    for i in range(batches):
        updates = rng.choice(rows, batch_rows // 2, replace=False)
        start = rows + i * batch_rows
        fresh = np.arange(start, start + batch_rows - batch_rows // 2)
        t = table(rng.permutation(np.concatenate([updates, fresh])), 10 + i)
        save(t, f"upsert-{i}")
        parts.append(t)
    # the table's final state: the last write of each key wins
    ids = np.concatenate([p["id"].to_numpy() for p in parts])
    amounts = np.concatenate([p["amount"].to_numpy() for p in parts])
    _, last_rev = np.unique(ids[::-1], return_index=True)
    last = len(ids) - 1 - last_rev
    final_ids, final_amounts = ids[last], amounts[last]
    lo, hi = rows // 2, rows // 2 + max(1, rows // 10)
    mask = (final_ids >= lo) & (final_ids < hi)
    spec = {
        "rows": rows,
        "batches": batches,
        "batch_rows": batch_rows,
        "range": [lo, hi],
        "expected": {
            "count": len(final_ids),
            "sum": float(final_amounts.sum()),
            "range_count": int(mask.sum()),
            "range_sum": float(final_amounts[mask].sum()),
        },
    }
    (data / "spec.json").write_text(json.dumps(spec, indent=2))
    return spec


# -- machine and load -----------------------------------------------------------
class LoadSampler:
    """Samples the 1-minute load average every few seconds while the systems run."""

    def __init__(self, every: float = 5.0) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(every,), daemon=True)

    def _loop(self, every: float) -> None:
        while not self._stop.wait(every):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def machine() -> dict[str, Any]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal")
    )
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "ram_gib": round(mem_kib / (1 << 20), 1),
        # the version line, not a "Picked up JDK_JAVA_OPTIONS" note printed before it
        "java": next((line for line in java.splitlines() if " version " in line), "?"),
        "os": platform.platform(),
    }


# -- the table -----------------------------------------------------------------
def table_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per phase: rows/s of each system and the ratios dts/peer (None if missing)."""
    out = []
    phases = [*PHASES, "full_read_python_source"]
    for phase in phases:
        rates: dict[str, float | None] = {}
        rows = None
        for system in SYSTEMS:
            got = results.get(system, {}).get("phases", {}).get(phase)
            rates[system] = got["rows"] / got["seconds"] if got and got["seconds"] > 0 else None
            rows = rows or (got or {}).get("rows")
        if not any(rates.values()):
            continue
        row: dict[str, Any] = {"phase": phase, "rows": rows, "rates": rates}
        for peer in PEERS:
            d, p = rates["dts"], rates[peer]
            row[f"dts_vs_{peer}"] = d / p if d and p else None
        out.append(row)
    return out


def _rate(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 1e6:
        return f"{v / 1e6:.2f}M"
    return f"{v / 1e3:.0f}k" if v >= 1e4 else f"{v:,.0f}"


def _ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def format_table(rows: list[dict[str, Any]]) -> str:
    """Markdown table: phase, rows, rows/s per system, ratios (dts rate / peer rate)."""
    head = ["phase", "rows", *(f"{LABEL[s]} rows/s" for s in SYSTEMS)]
    head += [f"dts/{LABEL[p]}" for p in PEERS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        name = r["phase"].replace("_", " ")
        if r["phase"] == "full_read_python_source":
            name = "full read, dts Python source only"
        if r["phase"] == "log_stream_kafka":
            name = "log stream, Spark's Kafka source (dts column)"
        cells = [name, f"{r['rows']:,}" if r["rows"] else "-"]
        cells += [_rate(r["rates"][s]) for s in SYSTEMS]
        cells += [_ratio(r[f"dts_vs_{p}"]) for p in PEERS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def check(spec: dict[str, Any], results: dict[str, Any]) -> list[str]:
    """Each system's reads must match the input: count and sum of the final table and of
    the key range. Returns the problems (empty: all agree)."""
    exp = spec["expected"]
    problems = []
    for system, res in results.items():
        for phase, count, total in (
            ("full_read", exp["count"], exp["sum"]),
            ("filtered_read", exp["range_count"], exp["range_sum"]),
        ):
            got = res["phases"].get(phase)
            if got is None:
                problems.append(f"{system}: no {phase}")
                continue
            n, s = got["result"]
            if n != count or abs((s or 0.0) - total) > 1e-6 * max(1.0, abs(total)):
                problems.append(f"{system} {phase}: got count {n}, sum {s}; want {count}, {total}")
    return problems


def _neighbours(load_before: float) -> str:
    """Whether other work shared the cores: the run itself keeps both busy, so only the
    load before it started tells."""
    if load_before >= 1.0:
        return f"**Shared**: other work ran on the same cores (load {load_before:.2f} before)."
    return f"Nothing else ran (load {load_before:.2f} before the run)."


def readme_section(report: dict[str, Any]) -> str:
    m, cfg, load = report["machine"], report["config"], report["load"]
    versions = report["versions"]
    lines = [
        f"Last run: {report['finished']} (UTC), `make bench-peers` "
        f"(`python -m bench.spark_peers {' '.join(report['argv'])}`).",
        "",
        f"- Machine: {m['cores']} cores ({m['cpu']}), {m['ram_gib']} GiB RAM, {m['java']}, "
        f"{m['os']}. {_neighbours(load['before'])}",
        f"- Load average (1 min): {load['before']:.2f} before, {load['after']:.2f} after, "
        f"during the run mean {load['mean']:.2f}, max {load['max']:.2f}.",
        f"- Data: {cfg['rows']:,} rows written, then {cfg['batches']} upsert batches of "
        f"{cfg['batch_rows']:,} (half updates, half new keys); "
        f"{cfg['expected']['count']:,} rows in the end; key range {cfg['range'][0]:,}-"
        f"{cfg['range'][1]:,}.",
        f"- Spark: local[{CORES}], spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}, "
        f"driver memory {DRIVER_MEMORY}, for every system.",
    ]
    for system in SYSTEMS:
        if system in versions:
            v = ", ".join(f"{k} {val}" for k, val in versions[system].items())
            lines.append(f"- {LABEL[system]}: {v}.")
    if report["problems"]:
        lines.append(f"- **Check failures**: {'; '.join(report['problems'])}.")
    else:
        lines.append("- Every system's full and filtered read matched the input (count and sum).")
    lines += ["", format_table(report["table"]), ""]
    for phase in ("changelog", "stream"):
        got = {
            LABEL[s]: report["systems"][s]["phases"].get(phase, {}).get("rows_returned")
            for s in SYSTEMS
            if s in report["systems"]
        }
        lines.append(
            f"- Rows returned by the {phase} phase: "
            + ", ".join(f"{k} {v:,}" for k, v in got.items() if v is not None)
            + "."
        )
    dts_phases = report["systems"].get("dts", {}).get("phases", {})
    ours, kafka = dts_phases.get("log_stream"), dts_phases.get("log_stream_kafka")
    if ours and kafka:
        ratio = (ours["rows"] / ours["seconds"]) / (kafka["rows"] / kafka["seconds"])
        lines.append(
            f"- Log tier: dts `tier=log` / Spark's Kafka source + `changelog_rows()` on the "
            f"same {ours['rows']:,} records: {ratio:.2f}x (rows returned: dts "
            f"{ours['rows_returned']:,}, Kafka source {kafka['rows_returned']:,})."
        )
    for system in SYSTEMS:
        notes = report["notes"].get(system) or {}
        for k, v in notes.items():
            lines.append(f"- {LABEL[system]} {k}: {v}")
    return "\n".join(lines).rstrip() + "\n"


# -- driver ---------------------------------------------------------------------
def run_side(
    system: str, data: Path, work: Path, repeat: int, profile: Path | None
) -> dict[str, Any]:
    out = work / f"{system}.json"
    cmd = [
        str(python_for(system)), "-m", f"bench.spark_peers.{system}_side",
        "--data", str(data), "--work", str(work / system), "--out", str(out),
        "--repeat", str(repeat),
    ]  # fmt: skip
    jars = jar_dir(system)
    if jars is not None:
        cmd += ["--jars", str(jars)]
    if profile is not None:
        cmd += ["--profile", str(profile)]
    env = dict(os.environ, PYSPARK_PYTHON=cmd[0], PYSPARK_DRIVER_PYTHON=cmd[0])
    started = time.monotonic()
    print(f"\n=== {LABEL[system]}: {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)
    print(f"=== {LABEL[system]}: done in {time.monotonic() - started:.0f} s", flush=True)
    return dict(json.loads(out.read_text()))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--batch-rows", type=int, default=1_000_000)
    ap.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    ap.add_argument(
        "--repeat", type=int, default=3, help="read phases keep the fastest of N (every system)"
    )
    ap.add_argument("--setup", action=argparse.BooleanOptionalAction, default=True,
                    help="create the peer venv and fetch jars when missing (--no-setup: "
                    "run only the systems already set up)")  # fmt: skip
    ap.add_argument("--work", type=Path, help="scratch directory (default: a new temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--profile", type=Path, help="cProfile each side's driver phases here")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "spark_peers.json")
    ap.add_argument("--readme", type=Path, help="regenerate this README's results section")
    ns = ap.parse_args(argv)
    systems = [s for s in SYSTEMS if s in ns.systems]
    if ns.setup:
        set_up(systems)
    else:
        skipped = [s for s in systems if not ready(s)]
        if skipped:
            print(f"not set up, skipped: {', '.join(skipped)}", flush=True)
        systems = [s for s in systems if s not in skipped]
    work = ns.work or Path(tempfile.mkdtemp(prefix="bench-spark-peers-"))
    work.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    print(f"load average before: {os.getloadavg()}", flush=True)
    print(
        f"generating {ns.rows:,} rows + {ns.batches} x {ns.batch_rows:,} in {work / 'data'}",
        flush=True,
    )
    shutil.rmtree(work / "data", ignore_errors=True)
    spec = generate(work / "data", ns.rows, ns.batches, ns.batch_rows)
    results: dict[str, Any] = {}
    failed: list[str] = []
    try:
        with LoadSampler() as load:
            for system in systems:
                try:
                    results[system] = run_side(system, work / "data", work, ns.repeat, ns.profile)
                except subprocess.CalledProcessError as e:  # the others still run and report
                    print(f"=== {LABEL[system]} failed (exit {e.returncode})", flush=True)
                    failed.append(f"{LABEL[system]} side failed (exit {e.returncode})")
    finally:
        if not ns.keep and ns.work is None:
            shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()[0]
    samples = load.samples or [load_after]
    report: dict[str, Any] = {
        "finished": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "argv": list(argv if argv is not None else sys.argv[1:]),
        "config": {k: spec[k] for k in ("rows", "batches", "batch_rows", "range", "expected")},
        "machine": machine(),
        "load": {
            "before": load_before,
            "after": load_after,
            "mean": sum(samples) / len(samples),
            "max": max(samples),
            "samples": samples,
        },
        "versions": {s: r["versions"] for s, r in results.items()},
        "notes": {s: r.get("notes", {}) for s, r in results.items()},
        "checks": {s: r.get("checks", {}) for s, r in results.items()},
        "problems": failed + check(spec, results),
        "table": table_rows(results),
        "systems": results,
    }
    print("\nrows/s per phase (ratios: dts rows/s over the peer's; > 1 means dts is faster)\n")
    print(format_table(report["table"]))
    print(
        f"\nload average (1 min): before {load_before:.2f}, after {load_after:.2f}, "
        f"during mean {report['load']['mean']:.2f}, max {report['load']['max']:.2f}"
    )
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {ns.out}")
    if ns.readme is not None:
        replace_section(ns.readme, BEGIN, END, readme_section(report))
        print(f"updated {ns.readme}")
    if report["problems"]:
        sys.exit("results disagree with the input: " + "; ".join(report["problems"]))
    return report


if __name__ == "__main__":
    main()
