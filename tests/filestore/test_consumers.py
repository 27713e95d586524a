"""Consumers: a streaming reader's recorded next snapshot holds back expiration, until it
has not been updated for ``consumer.expiration-time`` (real table directories)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from filestore.errors import InvalidIdentifier
from filestore.state.consumers import record_consumer
from tests.filestore.test_expire import _all_referenced_exist, _build, _state


def test_expiration_keeps_what_a_consumer_has_still_to_read(warehouse: Path) -> None:
    t, states = _build(warehouse, 14)
    latest = max(states)
    t.record_consumer("derived-stream", 6)  # read up to 5; 6 next
    result = t.expire(retain_min=2, older_than_ms=0, retain_max=3)  # the maximum too
    kept = [s.id for s in t.snapshots()]
    assert kept == list(range(5, latest + 1)), kept  # 5: the state a change read of 6 compares with
    assert result.expired_snapshots == [1, 2, 3, 4]
    _all_referenced_exist(t, Path(t.paths.root))
    for sid in kept:  # every retained state reads as it was committed
        assert _state(t, snapshot_id=sid) == states[sid]
    assert t.changes(5, latest).num_rows > 0  # what the consumer reads next is all there

    t.record_consumer("derived-stream", latest)  # it caught up
    t.expire(retain_min=2, older_than_ms=0)
    assert [s.id for s in t.snapshots()] == [latest - 1, latest]
    assert [(c.consumer_id, c.next_snapshot) for c in t.consumers()] == [("derived-stream", latest)]


def test_a_consumer_not_updated_within_its_expiration_time_holds_nothing(
    warehouse: Path,
) -> None:
    t, states = _build(warehouse, 10, **{"consumer.expiration-time": "10 min"})
    latest = max(states)
    now = int(time.time() * 1000)
    record_consumer(t, "gone", 2, now_ms=now - 11 * 60_000)  # last heard of 11 min ago
    record_consumer(t, "alive", 4, now_ms=now - 9 * 60_000)
    t.expire(retain_min=1, older_than_ms=0)
    assert t.snapshots()[0].id == 3  # held by "alive" only
    assert [c.consumer_id for c in t.consumers()] == ["alive"]  # "gone" was deleted
    assert t.delete_consumer("alive") and not t.delete_consumer("alive")
    t.expire(retain_min=1, older_than_ms=0)
    assert [s.id for s in t.snapshots()] == [latest]


def test_a_consumer_id_that_would_escape_its_directory_is_refused(warehouse: Path) -> None:
    t, _ = _build(warehouse, 1)
    with pytest.raises(InvalidIdentifier, match=r"consumer name '\.\./x' is not valid"):
        t.record_consumer("../x", 1)
    assert t.consumers() == []
