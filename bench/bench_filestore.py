"""FileStore benchmark: primary-key upsert and merge-read over 4 buckets vs raw pyarrow Parquet.

    python -m bench.bench_filestore --rows 1000000 --out bench/results/filestore.json

Phases (same data, same run):
- raw write / raw read: pyarrow.parquet.write_table (zstd, like the table's files) /
  read_table of the rows (the ceiling);
- upsert: TableWrite.write in 100k-row batches + commit (hash, sort, merge, Parquet, manifests);
- update: a second upsert of the same size, half of its keys new, half updates;
- merge-read: Table.read() of the result: two overlapping sorted runs per bucket merged by key.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table as RichTable

from filestore import Catalog


def make_rows(n: int, first_key: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = rng.permutation(np.arange(first_key, first_key + n, dtype=np.int64))
    return pa.table(
        {
            "id": keys,
            "amount": rng.random(n),
            "qty": rng.integers(0, 1000, n),
            "name": pa.array(np.char.add("customer-", (keys % 10_000).astype(str)).tolist()),
        }
    )


T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def run_round(
    work: Path,
    first: pa.Table,
    second: pa.Table,
    args: argparse.Namespace,
    best: Callable[[str, float], None],
) -> tuple[float, pa.Table]:
    """One round of every phase in a fresh directory; returns (merge-read seconds, result)."""
    n = first.num_rows
    work.mkdir(parents=True)
    raw_path = work / "raw.parquet"
    # zstd, the table's default file.compression: the same work per byte
    secs, _ = timed(lambda: pq.write_table(first, raw_path, compression="zstd"))
    best("raw_write", secs)
    secs, _ = timed(lambda: pq.read_table(raw_path))
    best("raw_read", secs)
    # default options otherwise (auto-compaction on): what a user gets
    table = Catalog(str(work / "wh")).create_table(
        "bench.orders", first.schema, primary_key=["id"], options={"bucket": str(args.buckets)}
    )

    def upsert(data: pa.Table) -> None:
        w = table.new_write("bench")
        for batch in data.to_batches(max_chunksize=args.batch):
            w.write(batch)
        w.commit()
        w.close()

    secs, _ = timed(lambda: upsert(first))
    best("up1", secs)
    secs, t1 = timed(lambda: table.read())
    best("read1", secs)
    assert t1.num_rows == n
    secs, _ = timed(lambda: upsert(second))
    best("up2", secs)
    return timed(lambda: table.read())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds; the best time of each phase counts"
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/filestore.json"))
    args = parser.parse_args()
    console = Console()
    n = args.rows
    first = make_rows(n, 0, 1)
    second = make_rows(n, n // 2, 2)
    tmp = Path(tempfile.mkdtemp(prefix="bench-filestore-"))
    try:
        console.print(f"[bold]filestore benchmark[/] rows={n:,} buckets={args.buckets} dir={tmp}")
        times: dict[str, float] = {}

        def best(name: str, secs: float) -> None:
            times[name] = min(secs, times.get(name, secs))

        for attempt in range(args.repeat):
            if args.repeat > 1:
                console.print(f"round {attempt + 1}/{args.repeat}")
            mread, t2 = run_round(tmp / f"round-{attempt}", first, second, args, best)
            best("mread", mread)
            shutil.rmtree(tmp / f"round-{attempt}", ignore_errors=True)
        raw_write, raw_read = times["raw_write"], times["raw_read"]
        up1, read1, up2, mread = times["up1"], times["read1"], times["up2"], times["mread"]
        expected = n + n // 2
        assert t2.num_rows == expected, (t2.num_rows, expected)
        file_rows = 2 * n

        results = {
            "rows": n,
            "buckets": args.buckets,
            "repeat": args.repeat,
            "raw_parquet_write_rows_per_s": n / raw_write,
            "raw_parquet_read_rows_per_s": n / raw_read,
            "upsert_rows_per_s": n / up1,
            "upsert_update_rows_per_s": n / up2,
            "read_single_run_rows_per_s": n / read1,
            "merge_read_input_rows_per_s": file_rows / mread,
            "merge_read_output_rows_per_s": expected / mread,
        }
        out = RichTable(title=f"FileStore, {n:,} rows, {args.buckets} buckets")
        for col in ("operation", "seconds", "rows/s", "vs raw pyarrow", "target"):
            out.add_column(col, justify="right" if col != "operation" else "left")
        rows = [
            ("raw pyarrow write_table", raw_write, n, None, ""),
            ("raw pyarrow read_table", raw_read, n, None, ""),
            ("upsert (new keys)", up1, n, raw_write, ">= 1M/s"),
            ("upsert (50% updates)", up2, n, raw_write, ">= 1M/s"),
            ("read, 1 run/bucket", read1, n, raw_read, ""),
            ("merge-read, 2 runs/bucket (input rows)", mread, file_rows, raw_read, ">= 5M/s"),
        ]
        for name, secs, count, base, target in rows:
            ratio = f"{(count / secs) / (n / base):.2f}x" if base else "1.00x"
            out.add_row(name, f"{secs:.3f}", f"{count / secs:,.0f}", ratio, target)
        console.print(out)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))
        console.print(f"results -> {args.out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
