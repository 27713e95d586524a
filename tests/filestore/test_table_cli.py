"""`dts table ...` through click's runner on a real warehouse (`dts demo`: tests/bridge/demo)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from click.testing import CliRunner

from bridge.cli import cli
from filestore import Catalog


def test_table_commands(warehouse: Path) -> None:
    runner = CliRunner()
    wh = ["--warehouse", str(warehouse)]
    r = runner.invoke(
        cli,
        [
            "table",
            "create",
            "db.t",
            "--schema",
            "id:int64 not null,name:string,dt:date",
            "-k",
            "id",
            "-p",
            "dt",
            "-o",
            "bucket=2",
            *wh,
        ],
    )
    assert r.exit_code == 0, r.output
    assert runner.invoke(cli, ["table", "list", *wh]).output.split() == ["db.t"]
    t = Catalog(str(warehouse)).get_table("db.t")
    assert t.schema.num_buckets == 2 and t.arrow_schema.field("dt").type == pa.date32()
    w = t.new_write("cli")
    w.write(
        pa.table(
            {"id": [1, 2], "name": ["a", "b"], "dt": pa.array([0, 1], pa.int32()).cast(pa.date32())}
        )
    )
    w.commit(barrier=5)
    r = runner.invoke(cli, ["table", "describe", "db.t", *wh])
    assert r.exit_code == 0 and "primary" in r.output and "barrier 5" in r.output, r.output
    assert "consumer" not in r.output
    t.record_consumer("derived", 2)
    r = runner.invoke(cli, ["table", "describe", "db.t", *wh])
    assert "consumer derived: reads snapshot 2 next, keeps snapshots from 1 until" in r.output
    r = runner.invoke(cli, ["table", "drop-consumer", "db.t", "derived", *wh])
    assert r.exit_code == 0 and t.consumers() == [], r.output
    r = runner.invoke(cli, ["table", "drop-consumer", "db.t", "derived", *wh])
    assert r.exit_code != 0 and "has no consumer 'derived'" in r.output
    r = runner.invoke(cli, ["table", "scan", "db.t", "-c", "id,name", *wh])
    assert r.exit_code == 0 and "2 rows" in r.output and "b" in r.output, r.output
    r = runner.invoke(cli, ["table", "snapshots", "db.t", *wh])
    assert r.exit_code == 0 and "APPEND" in r.output, r.output
    r = runner.invoke(cli, ["table", "scan", "db.missing", *wh])
    assert r.exit_code != 0 and "db.missing" in r.output
    r = runner.invoke(cli, ["table", "create", "db.t", "--schema", "id:int64", *wh])
    assert r.exit_code != 0 and "exists" in r.output
    r = runner.invoke(cli, ["table", "create", "db.u", "--schema", "id:nonsense", *wh])
    assert r.exit_code != 0 and "'id'" in r.output
    assert runner.invoke(cli, ["table", "drop", "db.t", *wh]).exit_code == 0
    assert runner.invoke(cli, ["table", "list", *wh]).output.split() == []


def test_warehouse_defaults_to_env(warehouse: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("DTS_WAREHOUSE", str(warehouse))
    r = CliRunner().invoke(cli, ["table", "create", "x", "--schema", "a:int64"])
    assert r.exit_code == 0, r.output
    assert Catalog(str(warehouse)).list_tables() == ["default.x"]
