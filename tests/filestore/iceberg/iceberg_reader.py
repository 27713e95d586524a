"""Reads dts tables through their Iceberg metadata with readers nobody here wrote.

Run by the tests in the Iceberg readers' own environment (``make iceberg-readers``):
pyiceberg (``StaticTable.from_metadata``) and DuckDB (``iceberg_scan`` of the table
directory and of its metadata file, with the iceberg and avro extensions from PyPI's packages, no download at run time). Reads a JSON request
on stdin, ``{"tables": [{"root": ..., "reads": [{"key": ..., "columns": [...],
"snapshot": id | null, "tag": name | null}]}]}`` (neither: the current snapshot), and
writes per engine, table root and key the rows, sorted.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import duckdb
import duckdb_ext
from pyiceberg.table import StaticTable


def _metadata(root: str) -> str:
    with open(f"{root}/metadata/version-hint.text") as f:
        return f"{root}/metadata/v{f.read().strip()}.metadata.json"


def _plain(v: Any) -> Any:
    return v if v is None or isinstance(v, int | float | str | bool) else str(v)


def _sorted(rows: Any) -> list[list[Any]]:
    return sorted(([_plain(v) for v in r] for r in rows), key=repr)


def _snapshot_id(read: dict[str, Any], refs: dict[str, Any]) -> int | None:
    if read.get("tag") is not None:
        return int(refs[read["tag"]]["snapshot-id"])
    return read.get("snapshot")


def pyiceberg_reads(root: str, reads: list[dict[str, Any]]) -> dict[str, Any]:
    table = StaticTable.from_metadata(_metadata(root))
    refs = {n: {"snapshot-id": r.snapshot_id} for n, r in table.metadata.refs.items()}
    out: dict[str, Any] = {}
    for read in reads:
        cols = read["columns"]
        scan = table.scan(snapshot_id=_snapshot_id(read, refs), selected_fields=tuple(cols))
        data = scan.to_arrow().to_pydict()
        out[read["key"]] = _sorted(zip(*(data[c] for c in cols), strict=True))
    return out


def duckdb_reads(con: Any, root: str, reads: list[dict[str, Any]]) -> dict[str, Any]:
    """Each read twice: ``iceberg_scan`` on the table directory (DuckDB follows
    ``version-hint.text``) and on the current metadata file; they must agree."""
    metadata = _metadata(root)
    with open(metadata) as f:
        refs = json.load(f)["refs"]
    out: dict[str, Any] = {}
    for read in reads:
        cols = ", ".join(f'"{c}"' for c in read["columns"])
        sid = _snapshot_id(read, refs)
        at = f", snapshot_from_id => {sid}" if sid is not None else ""
        by_dir, by_file = (
            _sorted(con.execute(f"select {cols} from iceberg_scan('{src}'{at})").fetchall())
            for src in (root, metadata)
        )
        if by_dir != by_file:
            raise AssertionError(f"{root} {read['key']}: the directory and {metadata} disagree")
        out[read["key"]] = by_dir
    return out


def main() -> None:
    request = json.load(sys.stdin)
    ext = os.path.join(next(iter(duckdb_ext.__path__)), "extensions")
    con = duckdb.connect(config={"extension_directory": ext, "autoinstall_known_extensions": False})
    con.execute("LOAD avro; LOAD iceberg;")
    result: dict[str, Any] = {"pyiceberg": {}, "duckdb": {}}
    for t in request["tables"]:
        result["pyiceberg"][t["root"]] = pyiceberg_reads(t["root"], t["reads"])
        result["duckdb"][t["root"]] = duckdb_reads(con, t["root"], t["reads"])
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
