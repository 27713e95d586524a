"""The LogStore against the real embedded broker (Apache Kafka): writer, reader, barriers, DLQ."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from test_logstore_codec import BAD_CASES, PK_SCHEMA

from logstore.broker import EmbeddedBroker, random_cluster_id
from logstore.dlq import REASON_HEADER
from logstore.errors import (
    BarrierError,
    BarrierNotFoundError,
    DecodeError,
    TopicError,
    TopicMismatchError,
    WriterFencedError,
)
from logstore.gate import BarrierPassed, DataBatch, Truncated
from logstore.markers import marker_headers
from logstore.normalize import Normalizer
from logstore.reader import LogReader
from logstore.spec import LogSpec, topic_settings
from logstore.topics import create_topic, delete_topic, describe_topic, ensure_topic
from logstore.writer import LogWriter
from tests.logstore.support import (
    ALL_TYPES,
    assert_tables_equal,
    bucketer_for,
    random_changelog,
    strip_meta,
    unique_topic,
)

pytestmark = pytest.mark.kafka
REPO = Path(__file__).resolve().parents[2]


def writer(broker: EmbeddedBroker, spec: LogSpec, **kw) -> LogWriter:  # type: ignore[no-untyped-def]
    kw.setdefault("barrier_interval_s", None)
    return LogWriter(broker.bootstrap, spec, bucketer_for(spec), **kw)


def read_until(
    broker: EmbeddedBroker, spec: LogSpec, barrier: int, **kw
) -> tuple[pa.Table, list[BarrierPassed]]:  # type: ignore[no-untyped-def]
    kw.setdefault("idle_timeout_s", 20)
    with LogReader(broker.bootstrap, spec, until_barrier=barrier, **kw) as r:
        data, barriers = r.read_all()
    return concat(spec, data), barriers


def concat(spec: LogSpec, batches: list[DataBatch]) -> pa.Table:
    if not batches:
        return pa.table({n: pa.array([], spec.schema.field(n).type) for n in spec.schema.names})
    return pa.concat_tables([b.table for b in batches])


def per_partition(table: pa.Table, partitions: np.ndarray, p: int) -> pa.Table:
    return table.filter(pa.array(partitions == p))


def table_rows(ids: list[int], tag: str = "x") -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"{tag}{i}" for i in ids],
            "d": pa.array([None] * len(ids), pa.date32()),
        }
    )


# --------------------------------------------------------------------------- round trip


def test_round_trip_every_type_with_updates_and_deletes(broker: EmbeddedBroker) -> None:
    spec = LogSpec(unique_topic("rt"), ALL_TYPES, ["id"], 3, changelog_mode="all")
    rng = random.Random(11)
    chunks = [random_changelog(rng, ALL_TYPES, n_keys=30, steps=120) for _ in range(3)]
    ids = []
    with writer(broker, spec) as w:
        for chunk in chunks:
            w.write(chunk)
            ids.append(w.barrier())
    got, barriers = read_until(broker, spec, ids[-1])
    assert sorted({(b.partition, b.barrier) for b in barriers}) == sorted(
        (p, b) for p in range(3) for b in ids
    )
    bucket = bucketer_for(spec)
    for i, chunk in enumerate(chunks):
        mine = got.filter(pc.equal(got["_barrier"], ids[i]))
        parts = np.asarray(bucket(chunk.drop_columns(["_row_kind"])))
        for p in range(3):
            want = per_partition(chunk, parts, p)
            have = mine.filter(pc.equal(mine["_partition"], p)).sort_by([("_offset", "ascending")])
            assert_tables_equal(strip_meta(have), want)


def test_upsert_log_normalized_back_to_full_changelog(broker: EmbeddedBroker) -> None:
    spec = LogSpec(unique_topic("ups"), PK_SCHEMA, ["id"], 2)  # auto -> upsert
    log = pa.concat_tables(
        [
            table_rows([1, 2, 3], "a").append_column("_row_kind", pa.array(["+I"] * 3)),
            table_rows([1, 1], "b").append_column("_row_kind", pa.array(["-U", "+U"])),
            table_rows([2], "a").append_column("_row_kind", pa.array(["-D"])),
        ]
    )
    with writer(broker, spec) as w:
        w.write(log)
        b = w.barrier()
    raw, _ = read_until(broker, spec, b, normalize=False)  # what upsert mode stores
    raw = raw.sort_by([("id", "ascending"), ("_offset", "ascending")])
    assert [(r["id"], r["name"], r["_row_kind"]) for r in raw.to_pylist()] == [
        (1, "a1", "+I"),
        (1, "b1", "+I"),
        (2, "a2", "+I"),
        (2, "a2", "-D"),
        (3, "a3", "+I"),
    ]
    # by hand: order matters per key only, and a key lives in one partition
    norm = Normalizer(spec)
    try:
        by_hand = norm.process(raw.sort_by([("_partition", "ascending"), ("_offset", "ascending")]))
    finally:
        norm.close()
    out, _ = read_until(broker, spec, b)  # the reader normalizes upsert logs by default
    want = {
        (1, "a1", "+I"),
        (2, "a2", "+I"),
        (3, "a3", "+I"),
        (1, "a1", "-U"),
        (1, "b1", "+U"),
        (2, "a2", "-D"),
    }
    for table in (by_hand, out):
        assert {(r["id"], r["name"], r["_row_kind"]) for r in table.to_pylist()} == want
        assert table.num_rows == 6
    assert out.column_names[-4:] == ["_row_kind", "_partition", "_offset", "_barrier"]


def test_a_normalizing_reader_gives_a_truncate_as_the_removal_of_its_partition_rows(
    broker: EmbeddedBroker,
) -> None:
    """Each partition's truncate comes with the -D of that partition's rows only: a
    partition whose truncate record the reader meets later still updates its keys (the
    gate releases partition by partition), so its update before the truncate is a
    -U/+U, not a +I."""
    spec = LogSpec(unique_topic("trunc"), PK_SCHEMA, ["id"], 2)  # upsert
    day = pa.array([1] * 6, pa.int32()).cast(pa.date32())
    first = pa.table({"id": list(range(6)), "name": [f"a{i}" for i in range(6)], "d": day})
    changed = first.set_column(1, "name", pa.array([f"b{i}" for i in range(6)]))
    with writer(broker, spec) as w:
        w.write(first)
        w.barrier()
        w.write(changed)  # every key updated, in both partitions, before the truncate
        w.truncate()
        w.write(first.slice(0, 1))
        b = w.barrier()
    events = []
    with LogReader(broker.bootstrap, spec, until_barrier=b, idle_timeout_s=20) as r:
        events = [e for e in r if not isinstance(e, BarrierPassed)]
    rows: dict[int, list[tuple[str, int, str]]] = {}
    for e in events:
        if isinstance(e, Truncated):
            rows.setdefault(e.partition, []).append(("truncate", -1, ""))
            continue
        for row in e.table.to_pylist():
            rows.setdefault(row["_partition"], []).append(
                (row["_row_kind"], row["id"], row["name"])
            )
    assert sorted(rows) == [0, 1]
    for seen in rows.values():
        cut = seen.index(("truncate", -1, ""))
        ids = sorted({i for _k, i, _n in seen[:cut]})
        assert ids  # both partitions hold keys
        # first barrier: +I; then each key's update as -U/+U; then the -D of the new value
        assert sorted(seen[:cut]) == sorted(
            [("+I", i, f"a{i}") for i in ids]
            + [("-U", i, f"a{i}") for i in ids]
            + [("+U", i, f"b{i}") for i in ids]
            + [("-D", i, f"b{i}") for i in ids]
        )
        assert [k for k, _i, _n in seen[:cut]][-len(ids) :] == ["-D"] * len(ids)
        assert seen[cut + 1 :] == ([("+I", 0, "a0")] if 0 in ids else [])


def test_reader_normalizer_spills_bounded_state(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """State bounded to 10 rows: shards spill to Arrow IPC and the changelog is still exact."""
    spec = LogSpec(unique_topic("spill"), PK_SCHEMA, ["id"], 2)  # upsert
    rng = random.Random(3)
    full = random_changelog(rng, PK_SCHEMA, n_keys=60, steps=300)
    # an update that changes nothing is not a change (the normalizer drops it): make each differ
    full = full.set_column(1, "name", pa.array([f"v{i}" for i in range(full.num_rows)]))
    full = _repair_update_pairs(full)
    with writer(broker, spec) as w:
        w.write(full.slice(0, 150))
        w.barrier()
        w.write(full.slice(150))
        b = w.barrier()
    spill = tmp_path / "spill"
    with LogReader(
        broker.bootstrap,
        spec,
        until_barrier=b,
        idle_timeout_s=20,
        max_records=40,
        normalize_state_rows=10,
        spill_dir=str(spill),
    ) as r:
        got = concat(spec, r.read_all()[0])
        assert r.normalizer is not None and r.normalizer.spills > 0
        assert list(spill.glob("shard-*.arrow")), "state should be on disk"
    per_key_got = _per_key(got)
    assert per_key_got == _per_key(full)


def _repair_update_pairs(table: pa.Table) -> pa.Table:
    """A -U row must carry the row it retracts: the previous image of its key."""
    rows = table.to_pylist()
    last: dict[int, dict] = {}
    for r in rows:
        if r["_row_kind"] in ("-U", "-D"):
            r.update({k: v for k, v in last[r["id"]].items() if k != "_row_kind"})
        if r["_row_kind"] in ("+I", "+U"):
            last[r["id"]] = dict(r)
    return pa.Table.from_pylist(rows, schema=table.schema)


def _per_key(table: pa.Table) -> dict[int, list[tuple[str, str]]]:
    out: dict[int, list[tuple[str, str]]] = {}
    for r in table.select(["id", "name", "_row_kind"]).to_pylist():
        out.setdefault(r["id"], []).append((r["name"], r["_row_kind"]))
    return out


# --------------------------------------------------------------------------- transactions


KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    import numpy as np, pyarrow as pa
    sys.path.insert(0, {tests!r})
    from logstore.spec import LogSpec
    from logstore.writer import LogWriter
    from tests.logstore.support import bucketer_for
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("d", pa.date32())])
    spec = LogSpec({topic!r}, schema, ["id"], 2, changelog_mode="all")
    w = LogWriter({bootstrap!r}, spec, bucketer_for(spec), barrier_interval_s=None)
    def rows(ids, tag):
        return pa.table({{"id": pa.array(ids, pa.int64()), "name": [tag + str(i) for i in ids],
                          "d": pa.array([None] * len(ids), pa.date32())}})
    w.write(rows(list(range(10)), "committed"))
    print("BARRIER", w.barrier(), flush=True)
    w.write(rows(list(range(10, 30)), "doomed"))
    w._producer.flush(30)  # the doomed rows are on the broker, inside the open transaction
    print("READY", flush=True)
    time.sleep(120)
    """
)


def test_writer_killed_mid_barrier_leaves_nothing_visible(broker: EmbeddedBroker) -> None:
    spec = LogSpec(unique_topic("kill"), PK_SCHEMA, ["id"], 2, changelog_mode="all")
    script = KILLED_WRITER.format(
        tests=str(Path(__file__).parent), topic=spec.topic, bootstrap=broker.bootstrap
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        first_barrier = int(proc.stdout.readline().split()[1])
        assert proc.stdout.readline().strip() == "READY"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # no abort, no goodbye: a crash
        proc.wait(timeout=10)
    with writer(broker, spec) as w:  # same transactional id: fences the dead writer
        assert w.last_barrier >= first_barrier
        w.write(table_rows([100, 101], "after"))
        second = w.barrier()
    assert second > first_barrier
    got, barriers = read_until(broker, spec, second)
    names = sorted(got["name"].to_pylist())
    assert names == sorted([f"committed{i}" for i in range(10)] + ["after100", "after101"])
    assert not any(n.startswith("doomed") for n in names)
    assert {b.barrier for b in barriers} == {first_barrier, second}


def test_new_writer_fences_the_old_one(broker: EmbeddedBroker) -> None:
    spec = LogSpec(unique_topic("fence"), PK_SCHEMA, ["id"], 2, changelog_mode="all")
    old = writer(broker, spec)
    old.write(table_rows([1, 2, 3], "old"))
    old._producer.flush(10)
    new = writer(broker, spec)
    with pytest.raises(WriterFencedError, match="took over"):
        old.barrier()
    new.write(table_rows([4], "new"))
    b = new.barrier()
    new.close()
    got, _ = read_until(broker, spec, b)
    assert got["name"].to_pylist() == ["new4"]


def test_aborted_barrier_is_not_visible(broker: EmbeddedBroker) -> None:
    spec = LogSpec(unique_topic("abort"), PK_SCHEMA, ["id"], 2, changelog_mode="all")
    with writer(broker, spec) as w:
        w.write(table_rows([1, 2], "gone"))
        w._producer.flush(10)
        w.abort()
        w.write(table_rows([3], "kept"))
        b = w.barrier()
    got, _ = read_until(broker, spec, b)
    assert got["name"].to_pylist() == ["kept3"]


# --------------------------------------------------------------------------- barriers


def test_until_barrier_aligns_four_partitions(broker: EmbeddedBroker) -> None:
    spec = LogSpec(unique_topic("align"), PK_SCHEMA, ["id"], 4, changelog_mode="all")
    ids: list[int] = []
    rounds: list[pa.Table] = []
    with writer(broker, spec) as w:
        for r in range(5):
            rows = table_rows(list(range(r * 20, r * 20 + 20)), f"r{r}-")
            for half in (rows.slice(0, 7), rows.slice(7)):  # interleaved writes per barrier
                w.write(half)
            rounds.append(rows)
            ids.append(w.barrier())
    assert ids == sorted(set(ids))
    got, barriers = read_until(broker, spec, ids[2])
    assert got.num_rows == 60
    assert set(got["_barrier"].to_pylist()) == set(ids[:3])
    for i in range(3):
        names = got.filter(pc.equal(got["_barrier"], ids[i]))["name"].to_pylist()
        assert sorted(names) == sorted(rounds[i]["name"].to_pylist())
    assert sorted((b.partition, b.barrier) for b in barriers) == sorted(
        (p, b) for p in range(4) for b in ids[:3]
    )
    assert len(set(got["_partition"].to_pylist())) == 4

    # from-barrier start: exactly the barriers after N
    got2, _ = read_until(broker, spec, ids[4], start={"barrier": ids[2]})
    assert sorted(got2["name"].to_pylist()) == sorted(
        rounds[3]["name"].to_pylist() + rounds[4]["name"].to_pylist()
    )

    # a barrier id between markers: stops at the marker after it, excluding that barrier
    got3, _ = read_until(broker, spec, ids[1] + 0, start={"barrier": ids[0]})
    assert set(got3["_barrier"].to_pylist()) == {ids[1]}
    with pytest.raises(BarrierNotFoundError, match="no marker"):
        LogReader(broker.bootstrap, spec, start={"barrier": ids[0] - 1})


def test_barrier_ids_strictly_increase_across_restarts(broker: EmbeddedBroker) -> None:
    spec = LogSpec(unique_topic("ids"), PK_SCHEMA, ["id"], 2, changelog_mode="all")
    future = int(time.time() * 1000) + 3_600_000
    with writer(broker, spec, clock_ms=lambda: future) as w:
        assert w.barrier() == future
        assert w.barrier() == future + 1  # clock did not move: bumped
    with writer(broker, spec) as w2:  # wall clock is behind the last id on the topic
        assert w2.last_barrier == future + 1
        assert w2.barrier() == future + 2
        with pytest.raises(BarrierError, match="not greater"):
            w2.barrier(future)
        assert w2.barrier(future + 100) == future + 100


def test_barrier_interval_closes_barriers_automatically(broker: EmbeddedBroker) -> None:
    spec = LogSpec(unique_topic("tick"), PK_SCHEMA, ["id"], 2, changelog_mode="all")
    with writer(broker, spec, barrier_interval_s=0.2) as w:
        w.write(table_rows([1, 2, 3]))
        deadline = time.monotonic() + 10
        while w.last_barrier == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        first = w.last_barrier
        assert first > 0
    with LogReader(broker.bootstrap, spec, stop_at_end=True, idle_timeout_s=10) as r:
        data, barriers = r.read_all()
    got = concat(spec, data)
    assert sorted(got["id"].to_pylist()) == [1, 2, 3]
    assert got["_barrier"].to_pylist() == [first] * 3 or min(got["_barrier"].to_pylist()) >= first
    assert len({b.barrier for b in barriers}) >= 1


def test_eventual_records_visible_before_any_barrier(broker: EmbeddedBroker) -> None:
    spec = LogSpec(unique_topic("ev"), PK_SCHEMA, ["id"], 2, consistency="eventual")
    w = writer(broker, spec)
    w.write(table_rows([1, 2, 3]))
    w._producer.flush(10)
    with LogReader(broker.bootstrap, spec, stop_at_end=True, idle_timeout_s=10) as r:
        data, barriers = r.read_all()
    got = concat(spec, data)
    assert sorted(got["id"].to_pylist()) == [1, 2, 3]
    assert got["_barrier"].null_count == 3 and barriers == []
    b = w.barrier()
    w.close()
    with LogReader(broker.bootstrap, spec, stop_at_end=True, idle_timeout_s=10) as r:
        _, barriers = r.read_all()
    assert {x.barrier for x in barriers} == {b}


# --------------------------------------------------------------------------- start modes


def test_start_from_timestamp_offsets_and_latest(broker: EmbeddedBroker) -> None:
    spec = LogSpec(unique_topic("start"), PK_SCHEMA, ["id"], 1, changelog_mode="all")
    with writer(broker, spec) as w:
        w.write(table_rows([1, 2], "early"))
        b1 = w.barrier()
        time.sleep(0.05)
        cut = int(time.time() * 1000)
        time.sleep(0.05)
        w.write(table_rows([3], "late"))
        b2 = w.barrier()
    got, _ = read_until(broker, spec, b2, start={"timestamp": cut})
    assert got["name"].to_pylist() == ["late3"]
    got, _ = read_until(
        broker, spec, b2, start={"offsets": {0: 3}}
    )  # 2 rows + marker + control record
    assert got["name"].to_pylist() == ["late3"]
    with LogReader(
        broker.bootstrap, spec, start="latest", stop_at_end=True, idle_timeout_s=10
    ) as r:
        data, barriers = r.read_all()
    assert data == [] and barriers == []
    assert b1 < b2


def test_topic_partition_mismatch_is_refused(broker: EmbeddedBroker) -> None:
    topic = unique_topic("mismatch")
    create_topic(broker.bootstrap, topic, 2, {})
    spec = LogSpec(topic, PK_SCHEMA, ["id"], 3)
    with pytest.raises(TopicMismatchError, match="2 partitions but the table has 3 buckets"):
        ensure_topic(broker.bootstrap, spec)
    ok = LogSpec(unique_topic("ret"), PK_SCHEMA, ["id"], 3, retention_ms=86_400_000)
    info = ensure_topic(broker.bootstrap, ok)
    assert info.partitions == 3
    described = describe_topic(broker.bootstrap, ok.topic)
    assert described is not None and described.config.get("retention.ms") == "86400000"
    assert described.config.get("cleanup.policy") == "delete"
    assert delete_topic(broker.bootstrap, ok.topic)
    assert describe_topic(broker.bootstrap, ok.topic) is None


def test_topic_replication_settings_from_table_options(broker: EmbeddedBroker) -> None:
    opts = {"log.replication-factor": "1", "log.min-insync-replicas": "1"}
    spec = LogSpec(unique_topic("rf"), PK_SCHEMA, ["id"], 2, **topic_settings(opts))
    ensure_topic(broker.bootstrap, spec)
    described = describe_topic(broker.bootstrap, spec.topic)
    assert described is not None and described.partitions == 2
    assert described.config.get("min.insync.replicas") == "1"
    # the factor reaches the broker: one-node Apache Kafka refuses 3 replicas, and the
    # error says which table option to lower
    three = LogSpec(unique_topic("rf3"), PK_SCHEMA, ["id"], 1, replication_factor=3)
    with pytest.raises(TopicError, match=r"replication factor 3.*log\.replication-factor"):
        ensure_topic(broker.bootstrap, three)
    assert describe_topic(broker.bootstrap, three.topic) is None


# --------------------------------------------------------------------------- DLQ


def test_bad_records_land_in_dlq_with_reason(broker: EmbeddedBroker) -> None:
    spec = LogSpec(unique_topic("dlq"), PK_SCHEMA, ["id"], 1, changelog_mode="all")
    ensure_topic(broker.bootstrap, spec)
    good = orjson.dumps(
        {"before": None, "after": {"id": 1, "name": "ok", "d": "2021-01-01"}, "op": "c"}
    )
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for bad in BAD_CASES.values():
        p.produce(spec.topic, bad, b'{"id":1}', 0)
        p.produce(spec.topic, good, b'{"id":1}', 0)
    p.produce(spec.topic, None, None, 0, headers=marker_headers(1))
    p.flush(10)

    with (
        LogReader(broker.bootstrap, spec, until_barrier=1, idle_timeout_s=20) as strict,
        pytest.raises(DecodeError) as info,
    ):
        strict.read_all()
    assert info.value.offset == 0 and "invalid JSON" in info.value.reason

    with LogReader(broker.bootstrap, spec, until_barrier=1, lenient=True, idle_timeout_s=20) as r:
        data, _ = r.read_all()
        assert r.dlq_count == len(BAD_CASES)
    assert concat(spec, data).num_rows == len(BAD_CASES)  # every good record still read

    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "dlq-check",
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(spec.dlq_topic, 0, 0)])
    reasons = []
    deadline = time.monotonic() + 20
    while len(reasons) < len(BAD_CASES) and time.monotonic() < deadline:
        for m in c.consume(100, timeout=0.5):
            if m.error() is None:
                reasons.append(dict(m.headers())[REASON_HEADER].decode())
    c.close()
    assert len(reasons) == len(BAD_CASES)
    for expected, reason in zip(BAD_CASES, reasons, strict=True):
        assert expected in reason


def test_cluster_ids_never_start_with_a_dash() -> None:
    # 0xF8 encodes to a leading '-': the storage tool would read "-t -..." as an option
    draws = iter([b"\xf8" + bytes(15), bytes(16)])
    cluster_id = random_cluster_id(lambda: next(draws))
    assert cluster_id == "AAAAAAAAAAAAAAAAAAAAAA"
    assert all(not random_cluster_id().startswith("-") for _ in range(2000))
