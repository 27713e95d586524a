"""Rebuild from real FileStore snapshots gives the live service's answers; consistent reads
through the FileStore API (with and without a MetaService) return one barrier's data."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from bridge.cli import cli
from bridge.consistency_read import consistent_read_tables, resolve_version, tag_consistent
from bridge.errors import ConsistentSnapshotExpired
from bridge.meta.client import MetaClient
from bridge.meta.errors import NoConsistentVersion
from bridge.meta.filestore_source import snapshot_barriers
from bridge.meta.models import ConsistencyMode, TableBarrierReport
from bridge.meta.rebuild import rebuild
from bridge.meta.store import Store
from filestore import Catalog
from filestore.errors import SnapshotNotFound

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])


def _commit(catalog: Catalog, name: str, barrier: int, ids: list[int], value: int) -> int:
    """Upsert rows (id, value) into ``name`` as the snapshot of ``barrier``; its id."""
    t = catalog.get_table(name)
    w = t.new_write(f"writer-{name}")
    try:
        w.write(pa.table({"id": ids, "v": [value] * len(ids)}, schema=SCHEMA))
        snap = w.commit(barrier=barrier)
    finally:
        w.close()
    return int(snap.id)


@pytest.fixture
def tables(warehouse: Path) -> Catalog:
    """t0 -> t1, t2: every derived table carries the base table's barrier ids; t2 lags."""
    cat = Catalog(str(warehouse))
    for name in ("db.t0", "db.t1", "db.t2"):
        cat.create_table(name, SCHEMA, primary_key=["id"])
    for b in (1000, 2000, 3000):
        _commit(cat, "db.t0", b, [1, 2], b)
        _commit(cat, "db.t1", b, [1, 2], b)
    _commit(cat, "db.t2", 1000, [1, 2], 1000)
    _commit(cat, "db.t2", 2000, [1, 2], 2000)
    return cat


def _answers(c: MetaClient | Store) -> list[tuple[object, ...]]:
    out = []
    for tables in (["db.t0", "db.t1"], ["db.t1", "db.t2"], ["db.t0", "db.t1", "db.t2"]):
        for mode in ConsistencyMode:
            v = c.consistent_version(tables, mode)
            out.append(
                (
                    v.barrier,
                    v.held_back_by,
                    v.holdback_ms,
                    [(t.table, t.snapshot_id) for t in v.tables],
                )
            )
    return out


def test_rebuild_gives_the_live_answers(
    tables: Catalog, warehouse: Path, client: MetaClient
) -> None:
    # live: the committers report each barrier as they commit it
    for name in ("db.t0", "db.t1", "db.t2"):
        for s in tables.get_table(name).snapshots():
            client.report_barrier(name, s.barrier, s.id)
    live = _answers(client)
    assert live[4][0] == 2000  # {t0, t1, t2} strong: t2 holds back at 2000

    # the database is lost; a new one is rebuilt from the FileStore
    fresh = Store(f"sqlite:///{warehouse / 'rebuilt.db'}")
    try:
        result = rebuild(fresh, tables)
        assert (result.tables, result.barriers) == (3, 8)
        assert _answers(fresh) == live
    finally:
        fresh.close()

    # the same without any service: straight from the snapshots
    direct = [
        resolve_version(ts, catalog=tables, mode=m)
        for ts in (["db.t0", "db.t1"], ["db.t1", "db.t2"], ["db.t0", "db.t1", "db.t2"])
        for m in ConsistencyMode
    ]
    assert [
        (v.barrier, v.held_back_by, v.holdback_ms, [(t.table, t.snapshot_id) for t in v.tables])
        for v in direct
    ] == live


def test_rebuild_command(tables: Catalog, warehouse: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["meta", "rebuild", "--warehouse", str(warehouse)])
    assert result.exit_code == 0, result.output
    assert "rebuilt 8 barriers of 3 tables" in result.output
    store = Store.for_warehouse(warehouse)
    try:
        assert store.consistent_version(["db.t1", "db.t2"]).barrier == 2000
        assert [b.barrier for b in store.barriers("db.t0")] == [3000, 2000, 1000]
    finally:
        store.close()
    again = runner.invoke(cli, ["meta", "rebuild", "--warehouse", str(warehouse), "--replace"])
    assert again.exit_code == 0 and "rebuilt 8 barriers" in again.output


def test_rebuild_through_the_api(tables: Catalog, client: MetaClient) -> None:
    result = rebuild(client, tables, ["db.t1"])
    assert result.barriers == 3
    assert client.table("db.t1").latest_barrier == 3000


def test_consistent_read_tables_reads_one_barrier(tables: Catalog, client: MetaClient) -> None:
    read = consistent_read_tables(tables, ["db.t0", "db.t1", "db.t2"])
    assert read.version.barrier == 2000 and read.version.held_back_by == "db.t2"
    for name, data in read.items():
        assert set(data.column("v").to_pylist()) == {2000}, name
    weak = consistent_read_tables(tables, ["db.t1", "db.t2"], mode="weak")
    assert set(weak["db.t1"].column("v").to_pylist()) == {3000}  # the difference strong hides
    assert set(weak["db.t2"].column("v").to_pylist()) == {2000}

    # with a MetaService answering instead of the snapshots
    client.register_job("spark-streaming", ["db.t0"], ["db.t1"], job_id="s1")
    _report_all(client, tables)
    via = consistent_read_tables(tables, ["db.t0", "db.t1"], meta_url=client.url)
    assert via.version.barrier == 3000
    assert set(via["db.t0"].column("v").to_pylist()) == {3000}
    via = consistent_read_tables(tables, ["db.t0", "db.t2"], meta_url=client.url, columns=["v"])
    assert via.version.barrier == 2000 and via["db.t2"].column_names == ["v"]


def _report_all(client: MetaClient, catalog: Catalog) -> None:
    client.report_barriers(
        [
            TableBarrierReport(table=n, barrier=s.barrier, snapshot_id=s.id, job_id=None)
            for n in ("db.t0", "db.t1", "db.t2")
            for s in catalog.get_table(n).snapshots()
        ]
    )


def test_a_strong_read_whose_snapshot_expired_names_the_table_that_lags(
    tables: Catalog, client: MetaClient
) -> None:
    """t2 holds {t0, t2} back at 2000 while t0's snapshot of 2000 expires: the read (and
    the tag) fails naming both tables, the lag and the option to raise, not as a bare
    'snapshot 2 does not exist'."""
    _report_all(client, tables)
    tables.get_table("db.t0").expire(retain_min=1, older_than_ms=0)
    with pytest.raises(ConsistentSnapshotExpired) as err:
        consistent_read_tables(tables, ["db.t0", "db.t2"], meta_url=client.url)
    message = str(err.value)
    assert "table db.t0's snapshot 2 at the consistent barrier 2000 has expired" in message
    assert "held back by db.t2, 1.0 s behind the newest table" in message
    assert "keeps snapshots for 3,600 s (snapshot.time-retained; at least 10)" in message
    assert "dts table alter db.t0 --set snapshot.time-retained=" in message
    assert isinstance(err.value.__cause__, SnapshotNotFound)
    with pytest.raises(ConsistentSnapshotExpired, match=r"db\.t0's snapshot 2"):
        tag_consistent(tables, ["db.t0", "db.t2"], "eod", meta_url=client.url)
    assert tables.get_table("db.t2").list_tags() == []  # all or none
    # the tables whose snapshots are kept still read at their barrier
    read = consistent_read_tables(tables, ["db.t1", "db.t2"], meta_url=client.url)
    assert read.version.barrier == 2000


def test_consistent_read_refuses_tables_without_a_common_barrier(tables: Catalog) -> None:
    tables.create_table("db.other", SCHEMA, primary_key=["id"])
    _commit(tables, "db.other", 1500, [1], 1)
    with pytest.raises(NoConsistentVersion, match="share no completed barrier"):
        consistent_read_tables(tables, ["db.t0", "db.other"])


@dataclass
class _Snap:
    id: int
    barrier: int | None
    commit_kind: str = "APPEND"
    time_millis: int = 0


def test_snapshot_barriers_prefers_the_committers_snapshot() -> None:
    points = snapshot_barriers(
        [
            _Snap(1, 100),
            _Snap(2, 100, "COMPACT"),
            _Snap(3, None),
            _Snap(5, 200, "COMPACT"),
            _Snap(6, 200),
        ]
    )
    assert {b: p.snapshot_id for b, p in points.items()} == {100: 1, 200: 6}


@pytest.mark.spark
def test_consistent_read_with_spark(
    tables: Catalog, warehouse: Path, spark, client: MetaClient
) -> None:  # type: ignore[no-untyped-def]
    from bridge.consistency_read import consistent_read

    frames = consistent_read(spark, ["db.t0", "db.t1", "db.t2"], warehouse=str(warehouse))
    assert frames.version.barrier == 2000
    for name, df in frames.items():
        assert {r["v"] for r in df.select("v").collect()} == {2000}, name
    weak = consistent_read(spark, ["db.t1", "db.t2"], warehouse=str(warehouse), mode="weak")
    assert {r["v"] for r in weak["db.t1"].select("v").collect()} == {3000}
    # a snapshot of the version expired: the same error, on the driver, before any job
    _report_all(client, tables)
    tables.get_table("db.t0").expire(retain_min=1, older_than_ms=0)
    with pytest.raises(ConsistentSnapshotExpired, match=r"held back by db\.t2"):
        consistent_read(spark, ["db.t0", "db.t2"], warehouse=str(warehouse), meta_url=client.url)
