"""The FileStore on an object store: a real S3 API (moto's server) on 127.0.0.1,
reached through pyarrow's S3 filesystem by an ``s3://`` warehouse URI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from filestore import Catalog, CommitProperties
from logstore.localhost import free_port

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
    one = commit.commit(messages, CommitProperties(7, barrier=7))
    again = t.new_commit("idem").commit(messages, CommitProperties(7, barrier=7))
    w.close()
    assert one is not None and again is not None and one.id == again.id
    assert [s.commit_identifier for s in t.snapshots()] == [7]


def test_snapshot_create_is_a_conditional_put_on_s3(
    s3_warehouse: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two committers race for one snapshot file: the second checked before the first
    wrote (modelled by its existence check answering 'absent'); its write must fail,
    never replace the first committer's snapshot."""
    first, second = Catalog(s3_warehouse).io, Catalog(s3_warehouse).io
    assert first.conditional is not None  # obstore, If-None-Match: *
    path = s3_warehouse.split("?")[0].removeprefix("s3://") + "/race/snapshot-1"
    assert first.create_if_absent(path, b"first committer")
    monkeypatch.setattr(second, "exists", lambda _path: False)
    assert not second.create_if_absent(path, b"second committer")
    assert first.read_bytes(path) == b"first committer"


def _s3_committer(warehouse: str, proc: int, commits: int, out: str) -> None:
    import json

    from filestore import CommitConflict

    t = Catalog(warehouse).get_table("db.many")
    acked, conflicts = [], 0
    for c in range(1, commits + 1):
        value = f"p{proc}-{c}"
        rows = pa.table({"id": pa.array([proc * 1000 + c, 42], pa.int64()), "v": [value] * 2})
        while True:  # a CommitConflict is no acknowledgement: write again and retry
            w = t.new_write(f"p{proc}")
            w.write(rows)
            try:
                snap = w.commit(identifier=c)
            except CommitConflict:
                conflicts += 1
                continue
            finally:
                w.close()
            assert snap is not None
            acked.append({"identifier": c, "snapshot": snap.id, "value": value})
            break
    with open(out, "w") as f:
        json.dump({"acked": acked, "conflicts": conflicts}, f)


def test_several_committers_per_table_on_s3_lose_no_commit(
    s3_warehouse: str, tmp_path: Path
) -> None:
    import json
    import multiprocessing as mp

    procs, commits = 3, 6  # contention enough to force retries; each commit costs ~2 s on moto
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    Catalog(s3_warehouse).create_table(
        "db.many",
        schema,
        primary_key=["id"],
        options={"auto-compaction": "false", "num-sorted-run.stop-trigger": "1000"},
    )
    ctx = mp.get_context("spawn")
    outs = [str(tmp_path / f"p{i}.json") for i in range(procs)]
    workers = [
        ctx.Process(target=_s3_committer, args=(s3_warehouse, i, commits, outs[i]))
        for i in range(procs)
    ]
    for p in workers:
        p.start()
    for p in workers:
        p.join(timeout=600)
        assert p.exitcode == 0
    t = Catalog(s3_warehouse).get_table("db.many")
    snaps = t.snapshots()
    chain = {(s.commit_user, s.commit_identifier): s for s in snaps}
    results = [json.loads(Path(o).read_text()) for o in outs]
    acked = [(i, a) for i, r in enumerate(results) for a in r["acked"]]
    conflicts = sum(r["conflicts"] for r in results)
    lost = [a for i, a in acked if (f"p{i}", a["identifier"]) not in chain]
    print(
        f"\nS3 committers: {procs} processes x {commits} commits, {len(snaps)} snapshots, "
        f"{conflicts} conflicts retried, {len(lost)} lost"
    )
    assert lost == [] and len(snaps) == procs * commits
    assert [s.id for s in snaps] == list(range(1, len(snaps) + 1))
    for i, a in acked:
        assert chain[(f"p{i}", a["identifier"])].id == a["snapshot"]
    # every acknowledged row is there, and the shared key holds the last commit's value
    data = t.read().to_pydict()
    values = dict(zip(data["id"], data["v"], strict=True))
    assert all(
        values[int(a["value"].split("-")[0][1:]) * 1000 + a["identifier"]] == a["value"]
        for _, a in acked
    )
    last = snaps[-1]
    assert values[42] == f"{last.commit_user}-{last.commit_identifier}"


def test_writes_on_s3_make_no_directory_markers(s3_warehouse: str) -> None:
    """S3 keys need no parents: data files, manifests, snapshots and the worker's prepared
    records are written without pyarrow's empty marker objects (a PUT per level per file
    before), and the prepared records still list and read back."""
    from bridge.worker.prepared import PreparedRecord, PreparedStore

    cat = Catalog(s3_warehouse)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    t = cat.create_table("db.markers", schema, primary_key=["id"], options={"bucket": "2"})
    w = t.new_write("markers")
    for barrier in (1, 2):
        w.write(pa.table({"id": [1, 2, barrier + 10], "v": ["a", "b", "c"]}, schema=schema))
        w.commit(barrier=barrier)
    w.close()
    store = PreparedStore(cat.io.fs, t.paths.root)
    store.put(PreparedRecord(barrier=7, bucket=1, next_offset=42, record_count=3))
    assert store.barriers() == {7: {1}}
    assert store.get(7, 1).next_offset == 42

    # the catalog's own warehouse/ and database markers stay: an empty database lists
    assert [k for k in _marker_keys(s3_warehouse) if "/markers" in k] == []
    assert t.read().num_rows == 4


def _marker_keys(warehouse: str) -> list[str]:
    """Keys ending in '/' (pyarrow's directory markers) in the warehouse's bucket, read
    through S3's own listing: pyarrow's would show them as directories, like real ones."""
    import boto3

    endpoint = "http://" + warehouse.split("endpoint_override=")[1].split("&")[0]
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    pages = client.get_paginator("list_objects_v2").paginate(Bucket="dts-test")
    return [o["Key"] for page in pages for o in page.get("Contents", []) if o["Key"].endswith("/")]
