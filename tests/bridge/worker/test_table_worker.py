"""TableWorker with the real LogStore codec and fake FileStore writer/commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.fs as pafs

from bridge.worker.metrics import WorkerMetrics
from bridge.worker.prepared import PreparedRecord, PreparedStore
from bridge.worker.state.status import TableStatus
from bridge.worker.table_worker import ResumePoint, TableHooks, TableWorker
from filestore import CommitProperties
from logstore.codec import TRUNCATE_VALUE
from logstore.markers import marker_headers
from logstore.records import LogRecords, decode_log_records
from logstore.spec import LogSpec

SPEC = LogSpec("dts.db.t", pa.schema([("id", pa.int64()), ("v", pa.string())]), ["id"], 2)


class FakeWrite:
    def __init__(self, log: list[Any]) -> None:
        self.rows: list[pa.Table] = []
        self.log = log
        self.closed = False
        self.stall_seconds = 0.0

    def write(self, data: pa.Table) -> None:
        self.rows.append(data)

    def prepare(self) -> list[Any]:
        ids = [i for t in self.rows for i in t.column("id").to_pylist()]
        self.rows = []
        return [ids]

    def discard(self) -> None:
        self.rows = []

    def close(self) -> None:
        self.closed = True
        self.log.append("closed")


class FakeCommit:
    def __init__(self) -> None:
        self.commits: list[tuple[int, list[Any], dict[int, int] | None]] = []
        self.kinds: list[str] = []

    def commit(self, messages: Any, properties: CommitProperties) -> None:
        offsets = dict(properties.log_offsets) if properties.log_offsets is not None else None
        self.commits.append((properties.identifier, list(messages), offsets))
        self.kinds.append(properties.kind)

    def committed_identifier(self) -> int | None:
        return self.commits[-1][0] if self.commits else None


def data(p: int, o: int, i: int) -> tuple[Any, ...]:
    value = orjson.dumps({"before": None, "after": {"id": i, "v": f"v{i}"}, "op": "c", "ts_ms": 1})
    return (p, o, orjson.dumps({"id": i}), value, None, 1000 + o)


def marker(p: int, o: int, barrier: int) -> tuple[Any, ...]:
    return (p, o, None, None, marker_headers(barrier), 1000 + o)


def truncate(p: int, o: int) -> tuple[Any, ...]:
    return (p, o, None, TRUNCATE_VALUE, None, 1000 + o)


def recs(raw: list[tuple[Any, ...]]) -> LogRecords:
    return LogRecords.from_raw(raw)


def make(
    tmp_path: Path, resume: dict[int, int] | None = None
) -> tuple[TableWorker, FakeCommit, list[Any]]:
    events: list[Any] = []
    fc = FakeCommit()
    dlq: list[Any] = []
    hooks = TableHooks(
        new_write=lambda: FakeWrite(events),
        new_commit=lambda: fc,
        resume=lambda: ResumePoint(dict(resume or {})),
        decode=lambda recs: decode_log_records(recs, SPEC, lenient=True),
        encode_message=lambda m: {"ids": m},
        decode_message=lambda d: d["ids"],
        send_to_dlq=dlq.extend,
    )
    store = PreparedStore(pafs.LocalFileSystem(), str(tmp_path / "t"))
    tw = TableWorker(
        "db.t",
        SPEC.topic,
        2,
        store,
        hooks,
        WorkerMetrics("job"),
        TableStatus("db.t", SPEC.topic, 2),
        "w",
    )
    return tw, fc, dlq


def test_barrier_commits_rows_before_markers_of_all_buckets(tmp_path: Path) -> None:
    tw, fc, _ = make(tmp_path)
    assert tw.assign([0, 1], generation=3) == {0: 0, 1: 0}
    tw.process(
        recs([data(0, 0, 10), data(1, 0, 11), data(0, 1, 12), marker(0, 2, 100), data(0, 3, 13)])
    )
    assert tw.commit_ready() == []  # bucket 1 has not passed 100
    tw.process(recs([marker(1, 1, 100)]))
    assert tw.commit_ready() == [100]
    assert fc.commits == [(100, [[10, 12], [11]], {0: 3, 1: 2})]
    # row 13 (after marker 100) waits for barrier 200
    tw.process(recs([marker(0, 4, 200), marker(1, 2, 200)]))
    assert tw.commit_ready() == [200]
    assert fc.commits[-1] == (200, [[13], []], {0: 5, 1: 3})
    assert tw.status.last_barrier_committed == 200


def test_every_row_before_a_marker_is_applied_whoever_wrote_it(tmp_path: Path) -> None:
    tw, fc, _ = make(tmp_path)
    tw.assign([0], generation=1)
    tw.num_buckets = 1
    tw.committer.num_buckets = 1  # type: ignore[union-attr]
    # offsets 0-1 come from another producer (read_committed hands over committed records
    # only); they belong to the barrier whose marker follows them, like the writer's own
    tw.process(recs([data(0, 0, 1), data(0, 1, 2), data(0, 3, 3), marker(0, 4, 100)]))
    tw.process(recs([data(0, 6, 4), marker(0, 7, 200)]))
    assert tw.commit_ready() == [100, 200]
    assert [c[1] for c in fc.commits] == [[[1, 2, 3]], [[4]]]


def test_a_truncate_drops_the_barriers_rows_before_it_and_replaces_the_table(
    tmp_path: Path,
) -> None:
    tw, fc, _ = make(tmp_path)
    tw.assign([0, 1], generation=1)
    tw.process(recs([data(0, 0, 1), marker(0, 1, 100), marker(1, 0, 100)]))
    assert tw.commit_ready() == [100] and fc.kinds == ["APPEND"]
    # barrier 200: rows 2 and 3 precede the truncate (one in an earlier batch), 4 and 5 follow
    tw.process(recs([data(0, 2, 2), data(1, 1, 3)]))
    tw.process(
        recs([truncate(0, 3), truncate(1, 2), data(0, 4, 4), data(1, 3, 5), marker(0, 5, 200)])
    )
    tw.process(recs([marker(1, 4, 200)]))
    assert tw.commit_ready() == [200]
    assert fc.commits[-1] == (200, [[4], [5]], {0: 6, 1: 5})
    assert fc.kinds[-1] == "OVERWRITE"
    tw.process(recs([data(0, 6, 6), marker(0, 7, 300), marker(1, 5, 300)]))
    assert tw.commit_ready() == [300] and fc.kinds[-1] == "APPEND"


def test_admits_only_owned_current_unconsumed(tmp_path: Path) -> None:
    tw, _, _ = make(tmp_path, resume={0: 5})
    tw.assign([0], generation=7)
    batch = recs([data(0, 4, 1), data(0, 5, 2), data(1, 0, 3), data(0, 6, 4)])
    admitted = tw.admit(batch, 7)
    # offset 4 is before the snapshot's offset; partition 1 is not owned
    assert admitted.offsets.tolist() == [5, 6]
    assert admitted.partitions.tolist() == [0, 0]
    assert [k for k in admitted.keys] == [batch.keys[1], batch.keys[3]]
    assert not len(tw.admit(batch, 6))  # fetched for an older epoch
    assert tw.committer is not None  # owns bucket 0: runs the table's committer


def test_bad_records_go_to_dlq_and_the_table_goes_on(tmp_path: Path) -> None:
    tw, fc, dlq = make(tmp_path)
    tw.assign([0, 1], generation=1)
    tw.process(
        recs(
            [
                (0, 0, b"k", b"not json", None, 1),
                data(0, 1, 5),
                marker(0, 2, 100),
                marker(1, 0, 100),
            ]
        )
    )
    assert len(dlq) == 1 and dlq[0].offset == 0
    assert tw.status.dlq_records == 1
    assert tw.commit_ready() == [100]
    assert fc.commits[0][1] == [[5], []]


def test_reassignment_discards_uncommitted_prepared_records(tmp_path: Path) -> None:
    tw, fc, _ = make(tmp_path)
    tw.assign([0, 1], generation=1)
    tw.process(recs([data(1, 0, 1), marker(1, 1, 100)]))  # bucket 1 prepared 100, bucket 0 did not
    assert tw.store.barriers() == {100: {1}}
    tw.revoke([0, 1])
    assert tw.committer is None
    tw.store.put(PreparedRecord(100, 0, 1))  # the other worker's bucket 0
    tw.assign([1], generation=2)  # bucket 1 is redone from the snapshot: its record goes
    assert tw.store.barriers() == {100: {0}}
    assert fc.commits == []


def test_normalizer_seeded_with_existing_rows_rebuilds_before_images() -> None:
    from logstore.normalize import Normalizer

    spec = LogSpec("dts.db.n", pa.schema([("id", pa.int64()), ("v", pa.string())]), ["id"], 1)
    n = Normalizer(spec)
    n.seed(pa.table({"id": [1, 2], "v": ["a", "b"]}))  # the bucket's committed rows
    out = n.process(
        pa.table(
            {
                "id": [1, 2, 3, 1],
                "v": ["a2", None, "c", "a2"],
                "_row_kind": ["+U", "-D", "+I", "+U"],
            }
        )
    )
    assert out.to_pylist() == [
        {"id": 1, "v": "a", "_row_kind": "-U"},
        {"id": 1, "v": "a2", "_row_kind": "+U"},
        {"id": 2, "v": "b", "_row_kind": "-D"},  # the full row, from the seeded state
        {"id": 3, "v": "c", "_row_kind": "+I"},
    ]  # the identical re-send of id 1 adds nothing
    assert n.state_rows == 2
