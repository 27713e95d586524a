"""The FileStore on an object store: a real S3 API (moto's server) on 127.0.0.1,
reached through pyarrow's S3 filesystem by an ``s3://`` warehouse URI."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from filestore import Catalog
from logstore.broker import free_port

moto_server = pytest.importorskip("moto.server", reason="moto[server] is a dev dependency")


@pytest.fixture(scope="module")
def s3_warehouse(monkeypatch_module: pytest.MonkeyPatch) -> Iterator[str]:
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch_module.setenv(key, value)
    query = f"endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
    fs, _ = pafs.FileSystem.from_uri(f"s3://dts-test?{query}&allow_bucket_creation=true")
    fs.create_dir("dts-test")
    try:
        yield f"s3://dts-test/warehouse?{query}"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_primary_key_table_on_s3_commits_merges_and_time_travels(s3_warehouse: str) -> None:
    cat = Catalog(s3_warehouse)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    t = cat.create_table("db.t", schema, primary_key=["id"], options={"bucket": "2"})
    w = t.new_write("s3-test")
    w.write(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema=schema))
    first = w.commit(barrier=10, log_offsets={0: 2, 1: 1})
    w.write(pa.table({"id": [2, 3], "v": ["B", None], "_row_kind": ["+U", "-D"]}))
    second = w.commit(barrier=20)
    w.close()

    reopened = Catalog(s3_warehouse).get_table("db.t")
    assert reopened.read().sort_by("id").to_pylist() == [
        {"id": 1, "v": "a"},
        {"id": 2, "v": "B"},
    ]
    assert reopened.read(snapshot_id=first.id).num_rows == 3
    assert reopened.read(barrier=10).num_rows == 3
    assert reopened.latest_snapshot().id == second.id
    assert reopened.snapshot(first.id).log_offsets == {0: 2, 1: 1}
    assert cat.list_tables("db") == ["db.t"]


def test_commit_idempotent_by_identifier_on_s3(s3_warehouse: str) -> None:
    cat = Catalog(s3_warehouse)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    t = cat.create_table("db.idem", schema, primary_key=["id"])
    w = t.new_write("idem")
    w.write(pa.table({"id": [1]}, schema=schema))
    messages = w.prepare()
    commit = t.new_commit("idem")
    one = commit.commit(messages, identifier=7, barrier=7)
    again = t.new_commit("idem").commit(messages, identifier=7, barrier=7)
    w.close()
    assert one is not None and again is not None and one.id == again.id
    assert [s.commit_identifier for s in t.snapshots()] == [7]
