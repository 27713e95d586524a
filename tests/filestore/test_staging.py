"""A staged creation (CTAS) that loses the race for its name to a writer that did not stage."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from filestore import Catalog
from filestore.errors import TableAlreadyExists
from filestore.staging import STAGING_DIR, StagedTable

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def test_a_name_taken_while_staged_refuses_the_commit_and_leaves_the_winner(
    tmp_path: Path,
) -> None:
    warehouse = str(tmp_path)
    catalog = Catalog(warehouse)
    catalog.create_database("db")
    staged = StagedTable.begin(warehouse, "db.t", SCHEMA, primary_key=["id"])
    with staged.table.new_write("ctas") as w:
        w.write(pa.table({"id": [1, 2], "v": ["staged", "staged"]}, schema=SCHEMA))
        w.commit()
    winner = catalog.create_table("db.t", SCHEMA, primary_key=["id"])  # not staged
    with winner.new_write("other") as w:
        w.write(pa.table({"id": [7], "v": ["winner"]}, schema=SCHEMA))
        w.commit()

    with pytest.raises(TableAlreadyExists, match=r"db\.t already exists: another writer"):
        staged.commit()

    # the winner's table is untouched, and nothing of the staged write is left
    assert catalog.get_table("db.t").read().to_pylist() == [{"id": 7, "v": "winner"}]
    assert not os.path.exists(staged.staging_warehouse)
    slot = tmp_path / STAGING_DIR / "db.t"
    assert not slot.exists() or not any(slot.iterdir())
