"""`dts table compact/expire/remove-orphans/tag/rollback` through click's runner."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from click.testing import CliRunner

from bridge.cli import cli
from filestore import Catalog
from filestore.state.levels import run_counts


def test_lifecycle_commands(warehouse: Path) -> None:
    t = Catalog(str(warehouse)).create_table(
        "db.t",
        pa.schema([("id", pa.int64()), ("dt", pa.string()), ("v", pa.int64())]),
        primary_key=["id"],
        partition_by=["dt"],
        options={"bucket": "2", "auto-compaction": "false"},
    )
    w = t.new_write("cli")
    for i in range(6):
        w.write(
            pa.table({"id": pa.array(range(20), pa.int64()), "dt": ["a", "b"] * 10, "v": [i] * 20})
        )
        w.commit()
    expected = t.read().sort_by("id")
    wh = ["--warehouse", str(warehouse)]
    run = CliRunner().invoke

    r = run(cli, ["table", "tag", "create", "db.t", "first", "--snapshot", "1", *wh])
    assert r.exit_code == 0 and "snapshot 1" in r.output, r.output
    r = run(cli, ["table", "compact", "db.t", "--partition", "dt=a", *wh])
    assert r.exit_code == 0 and "compacted" in r.output, r.output
    runs = run_counts(t, t.latest_snapshot())
    assert {n for (part, _), n in runs.items() if part == ("b",)} == {6}  # untouched
    assert {n for (part, _), n in runs.items() if part == ("a",)} == {1}
    r = run(cli, ["table", "compact", "db.t", "--full", *wh])
    assert r.exit_code == 0 and "compacted" in r.output, r.output
    assert t.read().sort_by("id") == expected
    r = run(cli, ["table", "expire", "db.t", "--retain-min", "1", "--older-than", "0 s", *wh])
    assert r.exit_code == 0 and "expired 7 snapshots" in r.output, r.output
    r = run(cli, ["table", "tag", "list", "db.t", *wh])
    assert r.exit_code == 0 and "first" in r.output
    r = run(cli, ["table", "remove-orphans", "db.t", "--older-than", "0 s", "--dry-run", *wh])
    assert r.exit_code == 0 and "0 orphan files" in r.output, r.output
    r = run(cli, ["table", "rollback", "db.t", "--tag", "first", *wh])
    assert r.exit_code == 0 and "rolled back to snapshot 1" in r.output, r.output
    assert t.read().column("v").to_pylist() == [0] * 20
    r = run(cli, ["table", "tag", "delete", "db.t", "first", *wh])
    assert r.exit_code == 0, r.output
    r = run(cli, ["table", "rollback", "db.t", *wh])
    assert r.exit_code != 0 and "exactly one" in r.output
    r = run(cli, ["table", "tag", "delete", "db.t", "nope", *wh])
    assert r.exit_code != 0 and "no tag" in r.output
