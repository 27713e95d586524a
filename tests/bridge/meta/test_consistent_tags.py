"""A consistent point as a tag of one name on every table of a set (issue 43): all tables
at the same barrier, an Iceberg tag too, read at that point by pyiceberg and DuckDB."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bridge.cli import cli
from bridge.consistency_read import tag_consistent
from bridge.meta.client import MetaClient
from bridge.meta.errors import NoConsistentVersion
from bridge.meta.models import TableBarrierReport
from filestore import Catalog, Table
from filestore.errors import TagError
from tests.bridge.meta.test_rebuild_and_read import SCHEMA, _commit
from tests.filestore.iceberg.test_iceberg_readers import (
    READERS,
    dts_rows,
    read_through_iceberg,
)

NAMES = ["db.t0", "db.t1", "db.t2"]
ICEBERG = {"metadata.iceberg.storage": "table-location", "deletion-vectors.enabled": "true"}


@pytest.fixture
def tables(warehouse: Path) -> Catalog:
    """t0 and t1 at barriers 1000..3000; t2 lags at 2000. Each row's v is its barrier."""
    cat = Catalog(str(warehouse))
    for name in NAMES:
        cat.create_table(name, SCHEMA, primary_key=["id"], options=ICEBERG)
    for b in (1000, 2000, 3000):
        for name in NAMES[: 2 if b == 3000 else 3]:
            _commit(cat, name, b, [1, 2, b], b)
    return cat


def _iceberg_refs(t: Table) -> dict[str, object]:
    meta = Path(t.paths.root, "metadata")
    version = (meta / "version-hint.text").read_text().strip()
    refs: dict[str, object] = json.loads((meta / f"v{version}.metadata.json").read_text())["refs"]
    return refs


def test_a_consistent_tag_pins_one_barrier_on_every_table(tables: Catalog, warehouse: Path) -> None:
    args = ["table", "tag", "consistent", "eod", *NAMES, "--warehouse", str(warehouse)]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    for name in NAMES:
        t = tables.get_table(name)
        snap = t.tag_snapshot("eod")
        assert snap.barrier == 2000 and f"{name}: tag eod -> snapshot {snap.id}" in r.output
        assert set(t.read(tag="eod").column("v").to_pylist()) == {1000, 2000}
        assert _iceberg_refs(t)["eod"] == {"snapshot-id": snap.id, "type": "tag"}

    # the tag exists: refused before any table changes, unless it is moved
    with pytest.raises(TagError, match=r"db.t0 already has a tag 'eod'; pass replace=True"):
        tag_consistent(tables, NAMES, "eod")
    _commit(tables, "db.t2", 3000, [1, 2, 3000], 3000)
    moved = tag_consistent(tables, NAMES, "eod", replace=True)
    assert moved.version.barrier == 3000
    assert {snap.barrier for snap in moved.values()} == {3000}
    assert all(tables.get_table(n).tag_snapshot("eod").barrier == 3000 for n in NAMES)


def test_all_or_none_when_a_table_cannot_take_the_tag(
    tables: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = Table.create_tag

    def refuse_t1(self: Table, name: str, snapshot_id: int | None = None) -> object:
        if self.name == "db.t1":
            raise TagError("table db.t1: no room")
        return real(self, name, snapshot_id)

    monkeypatch.setattr(Table, "create_tag", refuse_t1)
    with pytest.raises(TagError, match="no room"):
        tag_consistent(tables, NAMES, "eod")
    assert all(tables.get_table(n).list_tags() == [] for n in NAMES)  # t0's tag taken back
    tables.create_table("db.other", SCHEMA, primary_key=["id"])
    _commit(tables, "db.other", 1500, [1], 1)
    with pytest.raises(NoConsistentVersion, match="share no completed barrier"):
        tag_consistent(tables, ["db.t0", "db.other"], "eod")


@pytest.mark.skipif(not (READERS / "bin" / "python").exists(), reason="no Iceberg readers")
def test_iceberg_readers_read_the_set_at_the_metaservices_point(
    tables: Catalog, client: MetaClient
) -> None:
    """The MetaService says which barrier is consistent (here it knows t1 is derived from
    t0 and t2 lags); pyiceberg and DuckDB read every table at that tag."""
    client.register_job("spark-streaming", ["db.t0"], ["db.t1"], job_id="s1")
    client.report_barriers(
        [
            TableBarrierReport(table=n, barrier=s.barrier, snapshot_id=s.id, job_id=None)
            for n in NAMES
            for s in tables.get_table(n).snapshots()
        ]
    )
    pinned = tag_consistent(tables, NAMES, "eod", meta_url=client.url)
    assert pinned.version.barrier == 2000
    roots = {n: tables.get_table(n).paths.root for n in NAMES}
    reads = [{"key": "eod", "tag": "eod", "columns": ["id", "v"]}]
    seen = read_through_iceberg([{"root": roots[n], "reads": reads} for n in NAMES])
    for name in NAMES:
        t = tables.get_table(name)
        expected = dts_rows(t, t.tag_snapshot("eod").id, ["id", "v"])
        assert {row[1] for row in expected} == {1000, 2000}
        for engine in ("pyiceberg", "duckdb"):
            assert seen[engine][roots[name]]["eod"] == expected, (engine, name)
