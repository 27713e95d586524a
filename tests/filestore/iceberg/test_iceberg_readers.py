"""Readers nobody here wrote read dts tables through their Iceberg metadata (issue 43).

Property: on random histories (upserts with several flushes per commit, deletes,
compactions, overwrites, expirations, an added column, tags) of a primary-key table with
deletion vectors and of an append table, pyiceberg and DuckDB read, at every retained
snapshot and every tag, exactly what dts reads there. The readers run in their own
environment (``make iceberg-readers``), on the real files.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from filestore import Catalog, CommitKind, CommitProperties, Table
from tests.filestore.test_stored_changelog import _rows

CACHE = Path(os.environ.get("DTS_CACHE") or Path.home() / ".cache" / "dts")
READERS = Path(os.environ.get("DTS_ICEBERG_READERS") or CACHE / "venv-iceberg-readers-2")
READER = Path(__file__).with_name("iceberg_reader.py")

pytestmark = pytest.mark.skipif(
    not (READERS / "bin" / "python").exists(),
    reason=f"no Iceberg readers at {READERS}: `make iceberg-readers` installs them",
)

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("n", pa.int64())]
)
ICEBERG = {"metadata.iceberg.storage": "table-location", "bucket": "2"}
KINDS: dict[str, dict[str, Any]] = {
    "pk-dv": {"primary_key": ["id"], "options": {**ICEBERG, "deletion-vectors.enabled": "true"}},
    "append": {"primary_key": None, "options": ICEBERG},
}


def read_through_iceberg(tables: list[dict[str, Any]]) -> dict[str, Any]:
    """What pyiceberg and DuckDB read (``iceberg_reader.py`` in the readers' venv)."""
    done = subprocess.run(
        [str(READERS / "bin" / "python"), str(READER)],
        input=json.dumps({"tables": tables}),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _plain(v: Any) -> Any:
    return v if v is None or isinstance(v, int | float | str | bool) else str(v)


def dts_rows(t: Table, snapshot_id: int, columns: list[str]) -> list[list[Any]]:
    data = t.read(snapshot_id=snapshot_id, columns=columns).to_pydict()
    return sorted(
        ([_plain(v) for v in row] for row in zip(*(data[c] for c in columns), strict=True)),
        key=repr,
    )


def _columns(t: Table, snapshot_id: int) -> list[str]:
    return t.schema_manager.schema(t.snapshot(snapshot_id).schema_id).column_names


def _apply(t: Table, op: str, step: int, rnd: random.Random) -> None:
    w = t.new_write("w")
    try:
        extra = "extra" in t.schema.column_names
        if op in ("upsert", "delete", "overwrite"):
            ids = rnd.sample(range(60), rnd.randint(1, 20))
            kinds = ["-D"] * len(ids) if op == "delete" and t.schema.primary_key else None
            rows = _rows(ids, f"s{step}-", kinds)
            if extra:
                rows = rows.append_column("extra", pa.array([step] * len(ids), pa.int64()))
            w.write(rows)
            if op == "upsert" and rnd.random() < 0.4:  # a second flush, the same keys
                w.flush()
                w.write(rows.slice(0, len(ids) // 2 + 1))
            if op == "overwrite":
                t.new_commit("w").commit(
                    w.prepare(), CommitProperties(1000 + step, kind=CommitKind.OVERWRITE)
                )
            else:
                w.commit()
        elif op == "compact":
            t.compact(full=rnd.random() < 0.5)
        elif op == "expire":
            t.expire(retain_min=2, retain_max=5)
        elif op == "add-column" and not extra:
            t.add_column("extra", pa.int64())
        elif op == "tag":
            t.create_tag(f"tag{step}")
    finally:
        w.close()


def _reads(t: Table) -> list[dict[str, Any]]:
    reads = [
        {"key": str(s.id), "snapshot": s.id, "columns": _columns(t, s.id)} for s in t.snapshots()
    ]
    reads += [
        {"key": f"tag:{name}", "tag": name, "columns": _columns(t, snap.id)}
        for name, snap in t.list_tags()
    ]
    return reads


def _expected(t: Table, reads: list[dict[str, Any]]) -> dict[str, Any]:
    tags = dict(t.list_tags())
    out = {}
    for r in reads:
        sid = tags[r["tag"]].id if "tag" in r else r["snapshot"]
        out[r["key"]] = dts_rows(t, sid, r["columns"])
    return out


OPS = ["upsert"] * 4 + ["delete", "delete", "compact", "overwrite", "expire", "add-column", "tag"]


def _check(t: Table) -> int:
    """Every retained snapshot and tag read through both engines equals dts's read."""
    reads = _reads(t)
    got = read_through_iceberg([{"root": t.paths.root, "reads": reads}])
    expected = _expected(t, reads)
    for engine in ("pyiceberg", "duckdb"):
        assert got[engine][t.paths.root] == expected, (engine, t.name)
    return len(reads)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_histories_read_the_same_through_iceberg(warehouse: Path, seed: int) -> None:
    catalog = Catalog(str(warehouse))
    tables = [
        catalog.create_table(f"db.{kind.replace('-', '_')}_{seed}", SCHEMA, **spec)
        for kind, spec in KINDS.items()
    ]
    plan = [random.Random(seed).choice(OPS) for _ in range(16)]
    checked = 0
    for t in tables:
        rnd = random.Random(seed * 7)
        for step, op in enumerate(plan):
            if op == "expire":  # the snapshots it may take are checked before they go
                checked += _check(t)
            _apply(t, op, step, rnd)
        checked += _check(t)
    assert checked >= 2 * len(plan) // 3, plan


def test_a_primary_key_table_without_vectors_shows_only_buckets_that_need_no_merge(
    warehouse: Path,
) -> None:
    """Never a row a merge would remove: a bucket whose files overlap in keys is left out
    until a full compaction makes it one sorted run again."""
    t = Catalog(str(warehouse)).create_table(
        "db.merged", SCHEMA, primary_key=["id"], options={**ICEBERG, "auto-compaction": "false"}
    )
    for step, ids in enumerate([range(0, 30), range(20, 40)]):  # keys 20..29 in two runs
        w = t.new_write("w")
        w.write(_rows(list(ids), f"s{step}-"))
        w.commit()
        w.close()
    before = _latest(t)
    t.compact(full=True)
    after = _latest(t)
    seen = read_through_iceberg([{"root": t.paths.root, "reads": [before, after]}])
    dts_before = dts_rows(t, before["snapshot"], before["columns"])
    for engine in ("pyiceberg", "duckdb"):
        rows = seen[engine][t.paths.root]
        assert all(r in dts_before for r in rows["before"]), engine  # nothing dts would not read
        assert len(rows["before"]) < len(dts_before), engine  # buckets needing a merge left out
        # one sorted run per bucket after the full compaction: everything shows
        assert rows["after"] == dts_rows(t, after["snapshot"], after["columns"]), engine


def _latest(t: Table) -> dict[str, Any]:
    snap = t.latest_snapshot()
    assert snap is not None
    key = "after" if snap.commit_kind == "COMPACT" else "before"
    return {"key": key, "snapshot": snap.id, "columns": ["id", "v"]}


def test_turned_on_for_an_existing_table_the_readers_read_its_history(warehouse: Path) -> None:
    catalog = Catalog(str(warehouse))
    for kind, spec in KINDS.items():
        options = {k: v for k, v in spec["options"].items() if k != "metadata.iceberg.storage"}
        t = catalog.create_table(
            f"db.later_{kind.replace('-', '_')}", SCHEMA, spec["primary_key"], options=options
        )
        rnd = random.Random(5)
        for step, op in enumerate(["upsert", "upsert", "delete", "compact", "upsert"]):
            _apply(t, op, step, rnd)
        t.set_options({"metadata.iceberg.storage": "table-location"})
        assert _check(t) == len(t.snapshots())  # every retained snapshot, read by both


def test_a_snapshot_that_names_its_parents_list_reads_the_same_once_the_parent_expired(
    warehouse: Path,
) -> None:
    """Commits 2 and 3 rewrite key 0 only: its bucket then needs a merge and is hidden,
    the other bucket shows. Snapshot 3 shows what 2 shows, so it names 2's manifest list;
    the readers read it the same before and after 1 and 2 expire."""
    t = Catalog(str(warehouse)).create_table(
        "db.shared", SCHEMA, primary_key=["id"], options={**ICEBERG, "auto-compaction": "false"}
    )
    for step, ids in enumerate([list(range(30)), [0], [0]]):
        w = t.new_write("w")
        w.write(_rows(ids, f"s{step}-"))
        w.commit()
        w.close()
    meta = json.loads(Path(_metadata_file(t)).read_text())
    assert meta["snapshots"][-1]["manifest-list"].endswith("/snap-2-dts.avro")
    reads = [{"key": str(s), "snapshot": s, "columns": ["id", "v"]} for s in (2, 3)]
    first = read_through_iceberg([{"root": t.paths.root, "reads": reads}])
    t.expire(retain_min=1, retain_max=1)
    assert [s.id for s in t.snapshots()] == [3]
    again = read_through_iceberg([{"root": t.paths.root, "reads": reads[1:]}])
    dts_3 = dts_rows(t, 3, ["id", "v"])
    for engine in ("pyiceberg", "duckdb"):
        shown = first[engine][t.paths.root]
        assert shown["3"] == shown["2"] and shown["3"], engine  # the other bucket's rows
        assert all(r in dts_3 for r in shown["3"]) and len(shown["3"]) < len(dts_3), engine
        assert again[engine][t.paths.root]["3"] == shown["3"], engine


def _metadata_file(t: Table) -> str:
    hint = Path(t.paths.root, "metadata", "version-hint.text").read_text().strip()
    return f"{t.paths.root}/metadata/v{hint}.metadata.json"
