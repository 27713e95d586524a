"""Committer and prepared records with a fake FileStore commit (real files for records)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from bridge.worker.committer import TableCommitter
from bridge.worker.prepared import PreparedRecord, PreparedStore
from filestore import CommitProperties


class FakeCommit:
    """Idempotent by identifier, like filestore's TableCommit."""

    def __init__(self) -> None:
        self.snapshots: list[dict[str, Any]] = []

    def commit(self, messages: Any, properties: CommitProperties) -> Any:
        if any(s["identifier"] == properties.identifier for s in self.snapshots):
            return None
        self.snapshots.append(
            {
                "identifier": properties.identifier,
                "barrier": properties.barrier,
                "offsets": properties.log_offsets,
                "kind": properties.kind,
                "messages": list(messages),
            }
        )
        return self.snapshots[-1]

    def committed_identifier(self) -> int | None:
        return max((s["identifier"] for s in self.snapshots), default=None)


def _store(tmp_path: Path) -> PreparedStore:
    return PreparedStore(pafs.LocalFileSystem(), str(tmp_path / "db.db" / "t"))


def test_prepared_roundtrip_and_listing(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert store.barriers() == {}
    rec = PreparedRecord(barrier=7, bucket=1, next_offset=42, messages=[{"f": 1}], record_count=3)
    store.put(rec)
    store.put(PreparedRecord(barrier=7, bucket=0, next_offset=5))
    assert store.barriers() == {7: {0, 1}}
    got = store.get(7, 1)
    assert (got.next_offset, got.messages, got.record_count) == (42, [{"f": 1}], 3)
    store.drop(7)
    assert store.barriers() == {}
    store.drop(7)  # dropping twice is harmless


def test_commits_complete_barriers_in_order_with_offsets(tmp_path: Path) -> None:
    store, fake = _store(tmp_path), FakeCommit()
    seen: list[int] = []
    c = TableCommitter(
        "db.t", 2, store, fake, lambda m: m["id"], on_commit=lambda b, s, r, sid: seen.append(b)
    )
    store.put(PreparedRecord(100, 0, 11, [{"id": "a"}]))
    store.put(PreparedRecord(200, 0, 21, [{"id": "b"}]))
    store.put(PreparedRecord(200, 1, 22, []))
    assert c.commit_ready() == []  # 100 waits for bucket 1, 200 waits for 100
    store.put(PreparedRecord(100, 1, 12, [{"id": "c"}]))
    assert c.commit_ready() == [100, 200]
    assert [(s["identifier"], s["offsets"], s["messages"]) for s in fake.snapshots] == [
        (100, {0: 11, 1: 12}, ["a", "c"]),
        (200, {0: 21, 1: 22}, ["b"]),
    ]
    assert seen == [100, 200]
    assert store.barriers() == {}


def test_recommit_after_crash_is_a_no_op(tmp_path: Path) -> None:
    store, fake = _store(tmp_path), FakeCommit()
    store.put(PreparedRecord(100, 0, 11, [{"id": "a"}]))
    fake.commit(["a"], CommitProperties(100, 100, {0: 11}))  # committed, crash before cleanup
    c = TableCommitter("db.t", 1, store, fake, lambda m: m["id"])
    assert c.last_committed == 100
    assert c.commit_ready() == []
    assert len(fake.snapshots) == 1
    assert store.barriers() == {}  # stale record cleaned up


def test_two_committers_race_commit_once(tmp_path: Path) -> None:
    store, fake = _store(tmp_path), FakeCommit()
    a = TableCommitter("db.t", 1, store, fake, lambda m: m["id"])
    b = TableCommitter("db.t", 1, store, fake, lambda m: m["id"])
    store.put(PreparedRecord(100, 0, 11, [{"id": "a"}]))
    assert a.commit_ready() == [100]
    store.put(PreparedRecord(100, 0, 11, [{"id": "a2"}]))  # a late re-prepare of 100
    b.commit_ready()
    assert [s["identifier"] for s in fake.snapshots] == [100]


def test_emptied_barrier_directories_are_removed_once_committed(tmp_path: Path) -> None:
    store, fake = _store(tmp_path), FakeCommit()
    store.put(PreparedRecord(100, 0, 11, [{"id": "a"}]))
    store.put(PreparedRecord(200, 0, 21, [{"id": "b"}]))
    assert store.discard_bucket(0) == 2  # a new owner redoes both
    assert store.barriers() == {100: set(), 200: set()}
    c = TableCommitter("db.t", 1, store, fake, lambda m: m["id"])
    store.put(PreparedRecord(100, 0, 11, [{"id": "a"}]))
    assert c.commit_ready() == [100]
    assert store.barriers() == {200: set()}  # not committed yet: its buckets prepare it again


def test_a_record_withdrawn_after_the_listing_is_waited_for_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bucket's new owner deletes its records to redo them (a rebalance); the committer
    may have listed one just before: the barrier is incomplete again, nothing failed."""
    store, fake = _store(tmp_path), FakeCommit()
    store.put(PreparedRecord(100, 0, 11, [{"id": "a"}]))
    store.put(PreparedRecord(100, 1, 12, [{"id": "b"}]))
    listed = store.barriers()
    assert store.discard_bucket(1) == 1  # withdrawn right after the committer's listing
    c = TableCommitter("db.t", 2, store, fake, lambda m: m["id"])
    with monkeypatch.context() as m:
        m.setattr(store, "barriers", lambda: {k: set(v) for k, v in listed.items()})
        assert c.commit_ready() == []  # no FileNotFoundError
    assert fake.snapshots == []
    assert c.commit_ready() == [] and c.waiting_for == (100, [1])
    store.put(PreparedRecord(100, 1, 12, [{"id": "b"}]))  # redone by the new owner
    assert c.commit_ready() == [100]
    assert fake.snapshots[0]["messages"] == ["a", "b"] and c.waiting_for is None


def test_a_barrier_the_previous_committer_finished_late_is_not_waited_for(
    tmp_path: Path,
) -> None:
    """The previous owner of bucket 0 commits barrier 100 just after the new committer
    started; the new owner's bucket 0 prepares 100 again, bucket 1 (on another worker,
    past it already) never will. The new committer must see 100 is done and go on."""
    store, fake = _store(tmp_path), FakeCommit()
    new = TableCommitter("db.t", 2, store, fake, lambda m: m["id"], recheck_s=0.0)
    fake.commit(["a", "b"], CommitProperties(100, 100))  # the old committer, a moment later
    store.put(PreparedRecord(100, 0, 11, [{"id": "a"}]))  # redone by the new owner
    store.put(PreparedRecord(200, 0, 21, [{"id": "c"}]))
    store.put(PreparedRecord(200, 1, 22, [{"id": "d"}]))
    assert new.commit_ready() == [200]
    assert [s["identifier"] for s in fake.snapshots] == [100, 200]
    assert store.barriers() == {} and new.waiting_for is None
