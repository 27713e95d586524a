"""`make bench`: run every benchmark module under bench/ in turn.

Each module ``bench/bench_<part>.py`` is a script taking ``--rows N`` and
``--out PATH`` that prints its own table of rates and ratios (against peers and
raw pyarrow / confluent-kafka measured in the same run) and writes JSON.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# parts that also regenerate their results section of bench/README.md (the section is the
# last full run's: a `make bench` rewrites it, a module run by hand leaves it alone)
README_PARTS = {"peers"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--only", nargs="*", help="run only these parts (e.g. filestore logstore)")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    modules = sorted(p.stem for p in HERE.glob("bench_*.py"))
    if args.only:
        modules = [m for m in modules if m.removeprefix("bench_") in args.only]
    failed = []
    for i, mod in enumerate(modules, 1):
        part = mod.removeprefix("bench_")
        out = args.out / f"{part}.json"
        print(f"\n=== [{i}/{len(modules)}] {part} (rows={args.rows:,}) -> {out}", flush=True)
        started = time.monotonic()
        cmd = [sys.executable, "-m", f"bench.{mod}", "--rows", str(args.rows), "--out", str(out)]
        if part in README_PARTS:
            cmd += ["--readme", str(HERE / "README.md")]
        code = subprocess.call(cmd, cwd=HERE.parent)
        print(f"=== {part}: exit {code} in {time.monotonic() - started:.1f}s", flush=True)
        if code != 0:
            failed.append(part)
    print(f"\nresults in {args.out}")
    if failed:
        sys.exit(f"benchmarks failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
