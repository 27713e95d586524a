"""The Iceberg readers' half of ``bench/bench_iceberg.py``, run in their own environment
(``make iceberg-readers``: pyiceberg with its SQL catalog, DuckDB and its iceberg/avro
extensions from PyPI; none of the project's packages).

Reads a JSON request on stdin: ``{"dts_table": dir, "live_rows": parquet path, "copy_dir":
dir, "repeats": n}``. pyiceberg writes the live rows as a table of its own (one append into
a SQLite-catalogued warehouse: a copy with no deletes, the reader's best case), then DuckDB
reads both, the two in turn on every repeat so load on the machine falls on both alike.
Writes the times (seconds per repeat) and the rows each read saw as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import duckdb
import duckdb_ext
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog

QUERIES = {
    # a scan of two columns, with the deletes applied
    "aggregate": "SELECT count(*), sum(amount), max(qty) FROM {source}",
    # every column of every row into Arrow: what a client copying the table pays
    "full": "SELECT * FROM {source}",
}


def pyiceberg_copy(live_rows: str, copy_dir: str) -> str:
    """The metadata file of a pyiceberg-written table holding ``live_rows``."""
    os.makedirs(copy_dir, exist_ok=True)
    catalog = SqlCatalog(
        "bench", uri=f"sqlite:///{copy_dir}/catalog.db", warehouse=f"file://{copy_dir}"
    )
    catalog.create_namespace("bench")
    data = pq.read_table(live_rows)
    table = catalog.create_table("bench.copy", schema=data.schema)
    table.append(data)
    location: str = table.metadata_location
    return location.removeprefix("file://")


def run(request: dict[str, Any]) -> dict[str, Any]:
    copy_meta = pyiceberg_copy(request["live_rows"], request["copy_dir"])
    ext = os.path.join(next(iter(duckdb_ext.__path__)), "extensions")
    con = duckdb.connect(config={"extension_directory": ext, "autoinstall_known_extensions": False})
    con.execute("LOAD avro; LOAD iceberg;")
    sources = {
        "dts": f"iceberg_scan('{request['dts_table']}')",
        "pyiceberg_copy": f"iceberg_scan('{copy_meta}')",
    }
    times: dict[str, dict[str, list[float]]] = {q: {s: [] for s in sources} for q in QUERIES}
    rows: dict[str, dict[str, int]] = {q: {} for q in QUERIES}
    for _ in range(request["repeats"]):
        for query, sql in QUERIES.items():
            for name, source in sources.items():
                started = time.perf_counter()
                result = con.execute(sql.format(source=source)).fetch_arrow_table()
                times[query][name].append(time.perf_counter() - started)
                seen = result.column(0)[0].as_py() if query == "aggregate" else result.num_rows
                rows[query][name] = int(seen)
    return {"times": times, "rows": rows, "copy_metadata": copy_meta}


if __name__ == "__main__":
    json.dump(run(json.load(sys.stdin)), sys.stdout)
