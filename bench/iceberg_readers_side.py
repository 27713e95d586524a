"""The Iceberg readers' half of ``bench/bench_iceberg.py``, run in their own environment
(``make iceberg-readers``: pyiceberg with its SQL catalog, DuckDB and its iceberg/avro
extensions from PyPI; none of the project's packages).

Reads a JSON request on stdin: ``{"dts_tables": {name: dir}, "initial": parquet, "steps": [{"upsert":
parquet, "delete": parquet of ids}, ...], "live_rows": parquet, "copy_dir": dir, "repeats":
n}``. pyiceberg writes two tables of its own into a SQLite-catalogued warehouse:

- ``history``: the same history dts had: the initial rows appended, then each step
  through pyiceberg's own API, ``upsert`` of the updated rows on ``id`` then ``delete``
  of the deleted ids. pyiceberg copies on write: each step rewrites the data files the
  keys are in, so its table has no delete files. The headline peer.
- ``one_append``: the live rows in one append (one file, no deletes): the reader's best
  case, a second row.

Then DuckDB reads them all (the dts tables and pyiceberg's two), in turn on every repeat
so load on the machine falls on all alike. Writes the times (seconds per repeat), what each read saw, and how long pyiceberg's
history took, as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import duckdb
import duckdb_ext
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import In

QUERIES = {
    # a scan of two columns, with the deletes applied
    "aggregate": "SELECT count(*), sum(amount), max(qty) FROM {source}",
    # every column of every row into Arrow: what a client copying the table pays
    "full": "SELECT * FROM {source}",
}


def _catalog(copy_dir: str) -> SqlCatalog:
    os.makedirs(copy_dir, exist_ok=True)
    catalog = SqlCatalog(
        "bench", uri=f"sqlite:///{copy_dir}/catalog.db", warehouse=f"file://{copy_dir}"
    )
    catalog.create_namespace("bench")
    return catalog


def _location(table: Any) -> str:
    location: str = table.metadata_location
    return location.removeprefix("file://")


def one_append(catalog: SqlCatalog, live_rows: str) -> str:
    """The metadata file of a pyiceberg table holding ``live_rows`` in one append."""
    data = pq.read_table(live_rows)
    table = catalog.create_table("bench.one_append", schema=data.schema)
    table.append(data)
    return _location(table)


def history(catalog: SqlCatalog, initial: str, steps: list[dict[str, str]]) -> tuple[str, float]:
    """The metadata file of a pyiceberg table given dts's history, and the seconds the
    five steps took pyiceberg."""
    data = pq.read_table(initial)
    table = catalog.create_table("bench.history", schema=data.schema)
    table.append(data)
    started = time.perf_counter()
    for step in steps:
        table.upsert(pq.read_table(step["upsert"]), join_cols=["id"])
        ids = pq.read_table(step["delete"]).column("id").to_pylist()
        if ids:
            table.delete(In("id", ids))
    return _location(table), time.perf_counter() - started


def run(request: dict[str, Any]) -> dict[str, Any]:
    catalog = _catalog(request["copy_dir"])
    history_meta, history_seconds = history(catalog, request["initial"], request["steps"])
    append_meta = one_append(catalog, request["live_rows"])
    ext = os.path.join(next(iter(duckdb_ext.__path__)), "extensions")
    con = duckdb.connect(config={"extension_directory": ext, "autoinstall_known_extensions": False})
    con.execute("LOAD avro; LOAD iceberg;")
    sources = {
        **{name: f"iceberg_scan('{root}')" for name, root in request["dts_tables"].items()},
        "pyiceberg_history": f"iceberg_scan('{history_meta}')",
        "pyiceberg_one_append": f"iceberg_scan('{append_meta}')",
    }
    times: dict[str, dict[str, list[float]]] = {q: {s: [] for s in sources} for q in QUERIES}
    seen: dict[str, dict[str, Any]] = {q: {} for q in QUERIES}
    for _ in range(request["repeats"]):
        for query, sql in QUERIES.items():
            for name, source in sources.items():
                started = time.perf_counter()
                result: pa.Table = con.execute(sql.format(source=source)).fetch_arrow_table()
                times[query][name].append(time.perf_counter() - started)
                if query == "aggregate":
                    seen[query][name] = [_plain(v) for v in result.to_pylist()[0].values()]
                else:
                    seen[query][name] = [result.num_rows]
    return {
        "times": times,
        "seen": seen,
        "pyiceberg_history_seconds": history_seconds,
        "metadata": {"pyiceberg_history": history_meta, "pyiceberg_one_append": append_meta},
    }


def _plain(v: Any) -> Any:
    return v if v is None or isinstance(v, int | float) else str(v)


if __name__ == "__main__":
    json.dump(run(json.load(sys.stdin)), sys.stdout)
