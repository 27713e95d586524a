"""Where a log-tier range's old rows come from (`bridge.spark.read.log_state`), on real
FileStore tables: the snapshot each partition's state starts at, the refusal when the log
no longer holds the records after it, and the normalization on top of both."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from bridge.spark.errors import OptionError
from bridge.spark.read.log_state import check_replayable, normalized, state_refs
from bridge.spark.read.parts import LogStateRef
from bridge.tables import log_spec_for
from tests.bridge.spark.support import make_table, rows


def _commit(table: object, data: pa.Table, offsets: dict[int, int] | None) -> int:
    w = table.new_write("worker")  # type: ignore[attr-defined]
    w.write(data)
    return int(w.commit(log_offsets=offsets).id)


def test_each_partition_starts_at_the_newest_snapshot_before_its_range(tmp_path: Path) -> None:
    t = make_table(tmp_path, "db.s", buckets=2)
    first = _commit(t, rows(2), {0: 5, 1: 3})
    second = _commit(t, rows(2, start=2), {0: 9, 1: 3})
    third = _commit(t, rows(2, start=4), None)  # a write not from the log keeps the offsets
    refs = state_refs(t, str(tmp_path), {0: 7, 1: 4})
    assert refs == {
        0: LogStateRef(str(tmp_path), "db.s", first, 5),  # the second covers offset 8 too
        1: LogStateRef(str(tmp_path), "db.s", third, 3),
    }
    assert state_refs(t, str(tmp_path), {0: 2})[0].snapshot_id is None  # before any
    # a floor stops the walk: snapshots under it are not read
    assert state_refs(t, str(tmp_path), {0: 7}, floor=second)[0].snapshot_id is None


def test_a_replay_the_log_no_longer_holds_is_refused(tmp_path: Path) -> None:
    refs = {0: LogStateRef(str(tmp_path), "db.s", None, 0), 1: LogStateRef("w", "t", 4, 50)}
    check_replayable(refs, {0: 0, 1: 50}, "topic")
    with pytest.raises(OptionError, match=r"topic\[1\].*tier=hybrid.*log.normalize=false"):
        check_replayable(refs, {0: 0, 1: 51}, "topic")


def _log_rows(data: pa.Table, kinds: list[str], offsets: list[int]) -> pa.Table:
    return (
        data.append_column("_row_kind", pa.array(kinds, pa.string()))
        .append_column("_partition", pa.array([0] * len(kinds), pa.int32()))
        .append_column("_offset", pa.array(offsets, pa.int64()))
    )


def test_a_range_is_normalized_on_the_snapshot_and_the_replayed_log(tmp_path: Path) -> None:
    t = make_table(tmp_path, "db.n", buckets=1)
    snap = _commit(t, rows(3), {0: 3})
    spec = log_spec_for(t)
    changed = rows(2).set_column(2, "v", pa.array([7.0, 8.0]))
    replay = _log_rows(changed, ["+I", "+I"], [3, 4])  # upserts no snapshot holds yet
    again = rows(3).set_column(2, "v", pa.array([9.0, 8.0, 1.0]))
    key_only_delete = pa.table(
        {"id": [2], "k": [None], "v": [None]}, schema=again.schema
    )  # a delete whose record carried only the key
    batch = _log_rows(pa.concat_tables([again, key_only_delete]), ["+I"] * 3 + ["-D"], [5, 6, 7, 8])
    ref = LogStateRef(str(tmp_path), "db.n", snap, 3)
    out = normalized(batch, replay, ref, 0, spec)
    got = [(r["_row_kind"], r["id"], r["k"], r["v"], r["_offset"]) for r in out.to_pylist()]
    assert got == [
        ("-U", 0, "a0", 7.0, 5),  # the old row from the replayed log, not the snapshot
        ("+U", 0, "a0", 9.0, 5),
        # id 1 upserted to 8.0 again and id 2 to 1.0 again: unchanged, no rows
        ("-D", 2, "a2", 1.0, 8),  # the full row from the snapshot
    ]


def _changelog(out: pa.Table) -> list[tuple[str, int, float, int]]:
    return [(r["_row_kind"], r["id"], r["v"], r["_offset"]) for r in out.to_pylist()]


def test_a_truncate_in_the_range_retracts_every_row_the_bucket_then_held(tmp_path: Path) -> None:
    """Rows the range never names are removed too: the state holds the whole bucket (the
    snapshot's rows and the replayed ones), and the rows after the truncate are new."""
    t = make_table(tmp_path, "db.t", buckets=1)
    snap = _commit(t, rows(3), {0: 3})
    spec = log_spec_for(t)
    replay = _log_rows(rows(1, start=7), ["+I"], [3])  # id 7, in no snapshot yet
    changed = rows(1, start=1).set_column(2, "v", pa.array([9.0]))
    batch = _log_rows(pa.concat_tables([changed, rows(1)]), ["+I", "+I"], [4, 6])
    ref = LogStateRef(str(tmp_path), "db.t", snap, 3)
    out = normalized(batch, replay, ref, 0, spec, truncates=[5])
    assert _changelog(out)[:2] == [("-U", 1, 0.5, 4), ("+U", 1, 9.0, 4)]
    # at the truncate's offset, every row then live (order within it is the state's)
    assert sorted(_changelog(out)[2:6]) == [
        ("-D", 0, 0.0, 5), ("-D", 1, 9.0, 5), ("-D", 2, 1.0, 5), ("-D", 7, 3.5, 5),
    ]  # fmt: skip
    assert _changelog(out)[6:] == [("+I", 0, 0.0, 6)]  # id 0 again: new after the truncate
    assert out.schema == batch.schema


def test_two_truncates_in_a_range_retract_only_what_each_removed(tmp_path: Path) -> None:
    t = make_table(tmp_path, "db.u", buckets=1)
    spec = log_spec_for(t)
    batch = _log_rows(rows(2), ["+I", "+I"], [1, 3])
    ref = LogStateRef(str(tmp_path), "db.u", None, 0)  # no snapshot yet: state from offset 0
    out = normalized(batch, batch.slice(0, 0), ref, 0, spec, truncates=[0, 2, 4])
    assert _changelog(out) == [
        ("+I", 0, 0.0, 1), ("-D", 0, 0.0, 2), ("+I", 1, 0.5, 3), ("-D", 1, 0.5, 4),
    ]  # fmt: skip


def test_after_a_truncate_in_the_replay_the_snapshot_rows_are_gone(tmp_path: Path) -> None:
    t = make_table(tmp_path, "db.r", buckets=1)
    snap = _commit(t, rows(3), {0: 3})
    spec = log_spec_for(t)
    # id 1 at offset 3, the truncate at 4 (not a row), id 5 at offset 5
    replay = _log_rows(pa.concat_tables([rows(1, start=1), rows(1, start=5)]), ["+I"] * 2, [3, 5])
    ref = LogStateRef(str(tmp_path), "db.r", snap, 3)
    changed = rows(1, start=5).set_column(2, "v", pa.array([4.0]))
    batch = _log_rows(pa.concat_tables([rows(1), changed]), ["+I", "+I"], [6, 7])
    out = normalized(batch, replay, ref, 0, spec, replay_truncated_at=4)
    # id 0 was in the snapshot, but the truncate removed it: new again, not an update
    assert _changelog(out) == [("+I", 0, 0.0, 6), ("-U", 5, 2.5, 7), ("+U", 5, 4.0, 7)]
