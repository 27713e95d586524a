"""Unit tests of the Spark bridge's pure parts (no Spark session, no files beyond tmp)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql.datasource import EqualTo, GreaterThan, In, IsNull, Not, StringContains

from bridge.spark.errors import OffsetFormatError, OptionError
from bridge.spark.options import ReadOptions, WriteOptions
from bridge.spark.read._filters import conjunction
from bridge.spark.read.plan_log import Barrier, LogScanner, MarkerAt, admit
from bridge.spark.stream.offsets import FileOffset, HybridOffset, LogOffset, barrier_of
from bridge.spark.write._checkpoint import query_id, source_barrier
from filestore import CommitProperties


def test_offsets_round_trip_and_are_deterministic() -> None:
    f = FileOffset("db.t", 7, 1700, full=False)
    assert FileOffset.from_json(json.loads(json.dumps(f.to_json()))) == f
    log = LogOffset("db.t", {1: 5, 0: 3}, 42)
    assert json.dumps(log.to_json()) == json.dumps(LogOffset("db.t", {0: 3, 1: 5}, 42).to_json())
    assert list(log.to_json()["offsets"]) == ["0", "1"]
    assert LogOffset.from_json(log.to_json()) == log
    h = HybridOffset("db.t", "log", 3, {0: 9}, 11)
    assert HybridOffset.from_json(h.to_json()) == h
    assert barrier_of(h.to_json()) == 11 and barrier_of({"foo": 1}) is None
    with pytest.raises(OffsetFormatError, match="not a dts file-tier offset"):
        FileOffset.from_json(log.to_json())


def test_source_barrier_reads_spark_offset_log(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    (ck / "offsets").mkdir(parents=True)
    (ck / "metadata").write_text('{"id":"q-1"}')
    meta = '{"batchWatermarkMs":0}'
    a = json.dumps(FileOffset("db.a", 3, 100).to_json())
    b = json.dumps(LogOffset("db.b", {0: 1}, 250).to_json())
    (ck / "offsets" / "0").write_text(f"v1\n{meta}\n{a}\n{b}")
    (ck / "offsets" / "1").write_text(f'v1\n{meta}\n{{"kafka":1}}\n-')
    assert query_id(str(ck)) == "q-1"
    assert source_barrier(str(ck), 0) == 250  # several dts sources: the greatest
    assert source_barrier(f"file:{ck}", 1) is None  # no dts source in that batch


def test_filters_become_arrow_expressions() -> None:
    cols = {"a", "s"}
    expr = conjunction([EqualTo(("a",), 1), GreaterThan(("a",), 0), Not(In(("a",), (5, 6)))], cols)
    t = pa.table({"a": [1, 5, 2], "s": ["x", "y", "z"]})
    assert t.filter(expr).column("a").to_pylist() == [1]
    # unsupported or unknown-column filters are left to Spark
    assert conjunction([StringContains(("s",), "x"), EqualTo(("zz",), 1)], cols) is None
    assert t.filter(conjunction([IsNull(("s",))], cols)).num_rows == 0
    assert isinstance(expr, pc.Expression)


def test_options_validate() -> None:
    base = {"warehouse": "/w", "path": "db.t"}
    o = ReadOptions.parse({**base, "maxRowsPerTrigger": "10", "tier": "file"})
    assert o.max_rows_per_trigger == 10 and o.wants_metadata
    assert ReadOptions.parse({**base}).common.table == "db.t"
    assert ReadOptions.parse({"warehouse": "/w", "path": "t"}).common.table == "default.t"
    with pytest.raises(OptionError, match="tier"):
        ReadOptions.parse({**base, "tier": "kafka"})
    with pytest.raises(OptionError, match="at most one"):
        ReadOptions.parse({**base, "snapshot-id": "1", "barrier": "2"})
    with pytest.raises(OptionError, match=r"scan\.barrier"):
        ReadOptions.parse({**base, "scan.mode": "from-barrier"})
    with pytest.raises(OptionError, match="warehouse"):
        ReadOptions.parse({"path": "db.t"})
    assert ReadOptions.parse({**base, "consumer-id": "derived-1"}).consumer_id == "derived-1"
    with pytest.raises(OptionError, match=r"option 'consumer-id': consumer name '\.\./x'"):
        ReadOptions.parse({**base, "consumer-id": "../x"})
    with pytest.raises(OptionError, match=r"consumer-id.*tier=log"):
        ReadOptions.parse({**base, "consumer-id": "c", "tier": "log", "bootstrap": "h:1"})
    w = WriteOptions.parse({**base, "create": "true", "primary-key": "id, k", "table.bucket": "2"})
    assert w.create and w.primary_key == ["id", "k"] and w.table_options == {"bucket": "2"}


def test_admission_takes_whole_barriers() -> None:
    bs = [Barrier(1, {0: 3}, 5), Barrier(2, {0: 6}, 5), Barrier(3, {0: 9}, 5)]
    assert admit(bs, None, None) is bs[-1]
    assert admit(bs, 10, None) is bs[1]
    assert admit(bs, 1, None) is bs[0]  # soft limit: at least one barrier
    assert admit(bs, None, 2) is bs[1]
    assert admit([], 10, 1) is None


def test_scanner_completes_barriers_only_in_every_partition() -> None:
    s = LogScanner("unused:1", "t", 2)
    s.markers = {
        0: [MarkerAt(2, 10, 2), MarkerAt(5, 11, 2)],
        1: [MarkerAt(0, 10, 0)],  # partition 1 has not seen barrier 11 yet
    }
    done = s.complete_barriers({0: 0, 1: 0})
    assert [(b.barrier, b.ends, b.rows) for b in done] == [(10, {0: 3, 1: 1}, 2)]
    assert s.complete_barriers({0: 3, 1: 1}) == []


def test_record_admission_ends_on_a_barrier_when_one_fits() -> None:
    from bridge.spark.read.plan_log import record_admission

    b1 = Barrier(1, {0: 10, 1: 10}, 18)
    b2 = Barrier(2, {0: 14, 1: 12}, 4)
    # nothing fits: cut inside barrier 1, which the batch then does not complete
    cut = record_admission({0: 0, 1: 0}, [b1, b2], 6)
    assert cut.partial and cut.barrier is None and sum(cut.offsets.values()) <= 6
    # barrier 1 fits in the allowance but 2 does not: end exactly on 1
    on = record_admission({0: 6, 1: 6}, [b1, b2], 10)
    assert on == type(on)({0: 10, 1: 10}, 1, partial=False)
    # everything ready fits
    assert record_admission({0: 10, 1: 10}, [b2], 100).offsets == {0: 14, 1: 12}


def test_merge_splits_pack_into_balanced_groups_filling_every_core() -> None:
    from types import SimpleNamespace

    from bridge.spark.read.plan_scan import FILE_OPEN_COST_BYTES, TASK_TARGET_BYTES, pack_splits

    def split(mib: int) -> SimpleNamespace:
        size = mib * 1024 * 1024 - FILE_OPEN_COST_BYTES
        return SimpleNamespace(files=[SimpleNamespace(file_size=size)], mib=mib)

    # 40 splits of 27 MiB: 1080 MiB fill 5 groups of 256 MiB, rounded up to 3 per core
    many = [split(27) for _ in range(40)]
    groups = pack_splits(many, tasks=2)
    assert len(groups) == 6
    assert sorted(s.mib for g in groups for s in g) == [27] * 40  # each split exactly once
    loads = [sum(s.mib for s in g) for g in groups]
    assert max(loads) - min(loads) <= 27
    # unequal splits: the largest first, each to the cheapest group
    uneven = [split(m) for m in (100, 60, 50, 40, 10)]
    # (100+40, 60+50+10: greedy, not the optimum 130+130, which is fine for load balance)
    assert sorted(sum(s.mib for s in g) for g in pack_splits(uneven, tasks=2)) == [120, 140]
    # never more groups than splits; without tasks, just under the target size
    assert len(pack_splits([split(1)], tasks=8)) == 1
    assert len(pack_splits(many)) == -(-40 * 27 * 1024 * 1024 // TASK_TARGET_BYTES)
    assert pack_splits([], tasks=2) == []


@pytest.mark.kafka
def test_kept_log_consumers_outliving_their_broker_log_through_python(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """librdkafka's lines of the Spark readers' consumers go to the `logstore.kafka`
    logger: a consumer left over after its broker stopped printed one raw line to
    stderr per reconnect attempt (seen at the end of every benchmark run)."""
    import logging
    import threading

    from bridge.spark.read.kafka_access import consumer
    from logstore.broker import EmbeddedBroker
    from logstore.client_config import CLIENT_LOGGER, _OncePerCondition, client_logger

    # the logger passes each condition once per process: earlier tests may have used up
    # "connection refused", so this test gets a filter with a fresh memory
    shared = client_logger()
    fresh = [_OncePerCondition() if isinstance(f, _OncePerCondition) else f for f in shared.filters]
    monkeypatch.setattr(shared, "filters", fresh)
    heard = threading.Event()

    class Heard(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            heard.set()

    handler = Heard()
    logging.getLogger(CLIENT_LOGGER).addHandler(handler)
    try:
        with EmbeddedBroker(log_path=tmp_path / "broker.log") as broker:
            c = consumer(broker.bootstrap, eof=False)
            c.list_topics(timeout=30)  # connected
        for _ in range(300):  # the broker is gone: each poll serves librdkafka's log lines
            c.poll(0.1)
            if heard.is_set():
                break
        c.close()
    finally:
        logging.getLogger(CLIENT_LOGGER).removeHandler(handler)
    assert heard.is_set(), "no librdkafka line reached the logstore.kafka logger"
    assert "rdkafka#consumer" not in capfd.readouterr().err


def test_a_write_without_a_meta_url_needs_no_metaservice_client_stack() -> None:
    """A cluster's driver may lack the MetaService's client stack (pydantic, httpx): a
    write that names no MetaService must not import it (issue 26)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "sys.modules['pydantic'] = None\n"  # any import of them now fails
        "sys.modules['httpx'] = None\n"
        "from types import SimpleNamespace as NS\n"
        "import bridge\n"
        "from bridge.spark.write import meta_jobs\n"
        "opts = NS(common=NS(meta_url=None, table='db.t'), meta_sources=[])\n"
        "assert meta_jobs.register(opts, 'batch', 'job-1') is None\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_a_file_stream_polls_only_the_snapshots_after_its_offset(
    tmp_path: Path, snapshot_reads: list[str]
) -> None:
    """Spark asks for the latest offset at every trigger, and a table keeps an hour of
    snapshots by default: a poll must read what is new, not the table's history."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.types import LongType, StructField, StructType

    from bridge.spark.stream.file import FileStreamReader
    from filestore import Catalog

    t = Catalog(str(tmp_path)).create_table(
        "db.t", pa.schema([pa.field("id", pa.int64(), nullable=False)]), primary_key=["id"]
    )
    for i in range(40):
        w = t.new_write("w")
        w.write(pa.table({"id": [i]}, schema=t.arrow_schema))
        w.commit(barrier=1000 + i)
        w.close()
    latest = t.latest_snapshot()
    assert latest is not None and latest.id >= 40
    schema = StructType([StructField("id", LongType(), False)])
    reader = FileStreamReader(
        ReadOptions.parse({"warehouse": str(tmp_path), "path": "db.t"}), schema
    )
    read = snapshot_reads
    read.clear()  # what the set-up read does not count
    start = FileOffset("db.t", latest.id - 2, 1000).to_json()
    end = FileOffset.from_json(reader.latestOffset(start, ReadAllAvailable()))
    assert (end.snapshot, end.barrier) == (latest.id, latest.barrier)
    assert len(read) <= 3, read  # the two new snapshots (and the latest, once)
    read.clear()
    current = FileOffset("db.t", latest.id, latest.barrier).to_json()
    assert reader.latestOffset(current, ReadAllAvailable()) == current
    assert len(read) <= 1, read


def test_a_recurring_commit_reuses_the_files_earlier_commits_decoded(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The streaming sink's commits run in one reused Python worker, each on a new handle
    (`open_table_for_lookups`): the second looks up nothing from disk the first read."""
    import filestore.state.bucket_file as bucket_file
    from bridge.spark.options.catalog import open_table_for_lookups
    from filestore import Catalog

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    options = {"bucket": "1", "auto-compaction": "false"}
    Catalog(str(warehouse)).create_table("db.t", schema, primary_key=["id"], options=options)
    writer = Catalog(str(warehouse)).get_table("db.t")  # an executor's: its own handle
    reads: list[str] = []
    real = bucket_file.read_bucket_file
    monkeypatch.setattr(
        bucket_file,
        "read_bucket_file",
        lambda ctx, p, b, f: reads.append(f.file_name) or real(ctx, p, b, f),
    )

    def micro_batch(i: int, ids: list[int]) -> None:
        w = writer.new_write("sink")
        w.write(pa.table({"id": ids, "v": [f"{i}-{k}" for k in ids]}, schema))
        messages = w.prepare()
        w.close()
        table = open_table_for_lookups(str(warehouse), "db.t")
        table.new_commit("sink").commit(messages, CommitProperties(i))

    micro_batch(1, list(range(100)))
    writer.file_cache.clear()  # the commits must not lean on the writer's copies
    micro_batch(2, [1, 2, 3])
    first = list(reads)
    assert first, "the first commit with a lookup reads the old file"
    micro_batch(3, [4, 5])
    assert not set(reads[len(first) :]) & set(first), "files read once stay decoded"
    again, other = (open_table_for_lookups(str(warehouse), "db.t") for _ in range(2))
    assert again.file_cache.hits > 0
    assert again.manifest_store is other.manifest_store  # parsed manifests shared too
    rows = Catalog(str(warehouse)).get_table("db.t").read().to_pylist()
    assert {r["id"]: r["v"] for r in rows}[4] == "3-4" and len(rows) == 100


@pytest.mark.parametrize("eof", [True, False])
def test_log_consumers_never_let_the_broker_hold_a_fetch_long(eof: bool) -> None:
    """A consumer's seek waits for its fetch in flight: with librdkafka's default (the
    broker holds an empty fetch 500 ms) a log-tier task whose range did not start where
    its worker's kept consumer stopped (two queries read the same partitions) waited
    ~300 ms for it (addBatch 2.1 s -> 1.2 s at 250 changes/s in the pipeline benchmark);
    the driver's scan learns a partition's end only from an empty fetch."""
    from bridge.spark.read.kafka_access import FETCH_WAIT_MS, consumer_config

    config = consumer_config("127.0.0.1:9", eof=eof, isolation="read_committed")
    assert config["fetch.wait.max.ms"] == FETCH_WAIT_MS <= 50
    assert config["enable.partition.eof"] is eof
