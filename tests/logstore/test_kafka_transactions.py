"""Exactly-once on Apache Kafka: what the LogStore relies on, checked on the real broker.

Aborted records are in the log (read_uncommitted sees them) yet never reach a
read_committed reader; a producer SIGKILLed mid-transaction leaves nothing visible
once the coordinator times its transaction out; a zombie LogWriter with the same
transactional id is fenced with a clear error; other producers' records are never
dropped by our readers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import orjson
import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from test_logstore_broker import PK_SCHEMA, read_until, table_rows, writer

from logstore.broker import EmbeddedBroker
from logstore.errors import WriterError, WriterFencedError
from logstore.reader import LogReader
from logstore.spec import LogSpec
from logstore.topics import ensure_topic
from tests.logstore.support import bucketer_for, unique_topic


def _values(bootstrap: str, topic: str, isolation: str, partitions: int = 1) -> list[bytes]:
    """Every data record's value in ``topic`` up to its end for this isolation level."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    out: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + 30
        while len(at_end) < partitions and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.5):
                if m.error() is not None:
                    at_end.add(m.partition())
                elif m.value() is not None:
                    out.append(m.value())
        assert len(at_end) == partitions, f"{topic} not read to its end within 30s"
    finally:
        c.close()
    return out


def test_aborted_transaction_is_in_the_log_but_invisible_to_read_committed(
    broker: EmbeddedBroker,
) -> None:
    spec = LogSpec(unique_topic("rc"), PK_SCHEMA, ["id"], 1, changelog_mode="all")
    with writer(broker, spec) as w:
        w.write(table_rows([1, 2], "aborted"))
        w._producer.flush(10)
        w.abort()
        w.write(table_rows([3], "kept"))
        b = w.barrier()
    uncommitted = [
        orjson.loads(v)["after"]["name"]
        for v in _values(broker.bootstrap, spec.topic, "read_uncommitted")
    ]
    committed = [
        orjson.loads(v)["after"]["name"]
        for v in _values(broker.bootstrap, spec.topic, "read_committed")
    ]
    # the broker stores the aborted records; only its read_committed filter hides them
    assert uncommitted == ["aborted1", "aborted2", "kept3"]
    assert committed == ["kept3"]
    got, _ = read_until(broker, spec, b)
    assert got["name"].to_pylist() == ["kept3"]


RAW_TXN_PRODUCER = textwrap.dedent(
    """
    import sys
    from confluent_kafka import Producer
    p = Producer({{"bootstrap.servers": {bootstrap!r}, "transactional.id": {txn_id!r},
                  "transaction.timeout.ms": 3000}})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(20):
        p.produce({topic!r}, b'{{"before": null, "after": {{"id": %d, "name": "doomed", "d": null}}, "op": "c"}}' % i, None, 0)
    p.flush(30)  # on the broker, inside the open transaction
    print("READY", flush=True)
    sys.stdin.read()  # wait to be killed
    """
)


def test_producer_sigkilled_mid_transaction_is_aborted_by_timeout(broker: EmbeddedBroker) -> None:
    """No successor with the same transactional id: the coordinator's timeout aborts it."""
    spec = LogSpec(unique_topic("sigkill"), PK_SCHEMA, ["id"], 1, changelog_mode="all")
    ensure_topic(broker.bootstrap, spec)
    script = RAW_TXN_PRODUCER.format(
        bootstrap=broker.bootstrap, txn_id=f"doomed-{uuid.uuid4().hex[:6]}", topic=spec.topic
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert len(_values(broker.bootstrap, spec.topic, "read_uncommitted")) == 20
    # another writer's barrier commits after the dead transaction; read_committed stops at
    # the dead transaction's first offset until the coordinator aborts it (3 s timeout)
    with writer(broker, spec) as w:
        w.write(table_rows([100], "after"))
        b = w.barrier()
    began = time.monotonic()
    got, _ = read_until(broker, spec, b, idle_timeout_s=60)
    waited = time.monotonic() - began
    assert got["name"].to_pylist() == ["after100"]
    assert waited < 60
    assert [
        orjson.loads(v)["after"]["name"]
        for v in _values(broker.bootstrap, spec.topic, "read_committed")
    ] == ["after100"]


def test_zombie_writer_is_fenced_with_a_clear_error(broker: EmbeddedBroker) -> None:
    spec = LogSpec(unique_topic("zombie"), PK_SCHEMA, ["id"], 2, changelog_mode="all")
    zombie = writer(broker, spec)
    zombie.write(table_rows([1], "z"))
    first = zombie.barrier()
    zombie.write(table_rows([2, 3], "zombie"))  # open transaction when the successor starts
    zombie._producer.flush(10)
    successor = writer(broker, spec)
    assert successor.transactional_id == zombie.transactional_id
    with pytest.raises(WriterFencedError) as info:
        zombie.write(table_rows([4], "zombie"))
        zombie.barrier()
    assert zombie.transactional_id in str(info.value) and "took over" in str(info.value)
    # a fenced writer stays unusable: it says so instead of writing into the void
    with pytest.raises(WriterError, match="closed"):
        zombie.write(table_rows([5], "zombie"))
    successor.write(table_rows([6], "s"))
    second = successor.barrier()
    successor.close()
    got, barriers = read_until(broker, spec, second)
    assert sorted(got["name"].to_pylist()) == ["s6", "z1"]
    assert {x.barrier for x in barriers} == {first, second}


def test_reader_keeps_every_record_of_a_plain_producer(broker: EmbeddedBroker) -> None:
    """Records of a non-transactional producer between two markers belong to the next barrier."""
    spec = LogSpec(unique_topic("plain"), PK_SCHEMA, ["id"], 2, changelog_mode="all")
    bucketer = bucketer_for(spec)
    plain = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})

    def plain_rows(ids: list[int]) -> None:
        rows = table_rows(ids, "plain")
        parts = bucketer(rows).tolist()
        for p, row in zip(parts, rows.to_pylist(), strict=True):
            row["d"] = None
            env = {"before": None, "after": row, "op": "c"}
            plain.produce(spec.topic, orjson.dumps(env), orjson.dumps({"id": row["id"]}), p)
        assert plain.flush(10) == 0

    with writer(broker, spec) as w:
        w.write(table_rows([1, 2], "w"))
        b1 = w.barrier()
        plain_rows([10, 11, 12])  # before the writer's next transaction begins
        w.write(table_rows([3], "w"))
        plain_rows([13, 14])  # inside its open transaction
        b2 = w.barrier()
    with LogReader(broker.bootstrap, spec, until_barrier=b2, idle_timeout_s=20) as r:
        data, _ = r.read_all()
    got = pa.concat_tables([d.table for d in data])
    by_barrier = {
        b: sorted(got.filter(pa.compute.equal(got["_barrier"], b))["name"].to_pylist())
        for b in (b1, b2)
    }
    assert by_barrier == {
        b1: ["w1", "w2"],
        b2: ["plain10", "plain11", "plain12", "plain13", "plain14", "w3"],
    }


def test_a_wedged_offsets_call_ends_the_writer_and_the_next_one_fences_it(  # type: ignore[no-untyped-def]
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """librdkafka's send_offsets_to_transaction can ignore its timeout when the group
    coordinator's broker died (confluentinc/librdkafka#5456): the writer gives up on its
    client after SEND_OFFSETS_S, and a new writer with the same id aborts the barrier."""
    import threading

    import logstore.producer_transactions as transactions_module
    from logstore.errors import WriterStuckError

    monkeypatch.setattr(transactions_module, "SEND_OFFSETS_S", 0.5)
    spec = LogSpec(unique_topic("wedged"), PK_SCHEMA, ["id"], 1, changelog_mode="all")
    w = writer(broker, spec, transactional_id=f"wedge-{uuid.uuid4().hex[:6]}")
    released = threading.Event()

    class Wedged:
        def __init__(self, real: Producer) -> None:
            self._real = real

        def send_offsets_to_transaction(self, *args: object) -> None:
            released.wait(30)  # as the client stuck in the call

        def __getattr__(self, name: str) -> object:
            return getattr(self._real, name)

    w._producer = Wedged(w._producer)  # type: ignore[assignment]
    w.write(table_rows([1], "lost"))
    offsets = [TopicPartition("src", 0, 5)]
    t0 = time.monotonic()
    with pytest.raises(WriterStuckError, match="did not accept the source offsets"):
        w.barrier(source_offsets=offsets, group_metadata=object())
    assert time.monotonic() - t0 < 10
    w.close()  # returns at once: nothing more is asked of the wedged client
    released.set()
    again = writer(broker, spec, transactional_id=w.transactional_id)
    again.write(table_rows([2], "kept"))
    again.barrier()
    again.close()
    committed = [orjson.loads(v) for v in _values(broker.bootstrap, spec.topic, "read_committed")]
    assert [r["after"]["name"] for r in committed if r.get("after")] == ["kept2"]


def test_a_fatal_client_error_ends_the_writer_and_the_next_one_goes_on(  # type: ignore[no-untyped-def]
    broker: EmbeddedBroker,
) -> None:
    """A transaction coordinator killed mid-commit left librdkafka's producer in a fatal
    state (INVALID_TXN_STATE, seen in tests/bridge/worker/test_worker_kafka_cluster.py):
    it refuses every call, even the flush of close(), which then crashed `dts ingest`
    instead of letting it restart. The writer now says the client is unusable
    (WriterStuckError, what the ingest restarts on), close() asks nothing more of it, and a
    new writer with the same id aborts the barrier and goes on."""
    from confluent_kafka import KafkaError, KafkaException

    from logstore.errors import WriterStuckError

    spec = LogSpec(unique_topic("fatal"), PK_SCHEMA, ["id"], 1, changelog_mode="all")
    w = writer(broker, spec, transactional_id=f"fatal-{uuid.uuid4().hex[:6]}")

    class Broken:
        def __init__(self, real: Producer) -> None:
            self._real = real

        def commit_transaction(self, *args: object) -> None:
            raise KafkaException(KafkaError(KafkaError.INVALID_TXN_STATE, fatal=True))

        def abort_transaction(self, *args: object) -> None:
            raise AssertionError("a fatal client is asked nothing more")

        def flush(self, *args: object) -> int:
            raise AssertionError("a fatal client is asked nothing more")

        def __getattr__(self, name: str) -> object:
            return getattr(self._real, name)

    real = w._producer
    w._producer = Broken(real)  # type: ignore[assignment]
    w.write(table_rows([1], "lost"))
    with pytest.raises(WriterStuckError, match="fatal error"):
        w.barrier()
    w.close()  # returns at once
    again = writer(broker, spec, transactional_id=w.transactional_id)
    again.write(table_rows([2], "kept"))
    again.barrier()
    again.close()
    real.flush(0)  # the first producer's own threads end with the test
    committed = [orjson.loads(v) for v in _values(broker.bootstrap, spec.topic, "read_committed")]
    assert [r["after"]["name"] for r in committed if r.get("after")] == ["kept2"]


class _FailingCommits:
    """A producer whose next commit_transaction calls raise ``errors`` (then the real one)."""

    def __init__(self, real: Producer, errors: list[object]) -> None:
        self._real = real
        self.errors = errors
        self.commits = 0

    def commit_transaction(self, *args: object) -> None:
        from confluent_kafka import KafkaException

        self.commits += 1
        if self.errors:
            raise KafkaException(self.errors.pop(0))
        self._real.commit_transaction(*args)

    def __getattr__(self, name: str) -> object:
        return getattr(self._real, name)


def test_a_retriable_commit_failure_is_committed_by_the_next_call(  # type: ignore[no-untyped-def]
    broker: EmbeddedBroker,
) -> None:
    """librdkafka's contract: a commit that fails retriably (its coordinator moving after a
    broker died) is called again, and the barrier commits whole, once."""
    from confluent_kafka import KafkaError

    spec = LogSpec(unique_topic("retry"), PK_SCHEMA, ["id"], 1, changelog_mode="all")
    w = writer(broker, spec, transactional_id=f"retry-{uuid.uuid4().hex[:6]}")
    failing = _FailingCommits(w._producer, [KafkaError(KafkaError._TIMED_OUT, retriable=True)])
    w._producer = failing  # type: ignore[assignment]
    w.write(table_rows([1, 2], "kept"))
    w.barrier()
    w.close()
    assert failing.commits == 2
    committed = [orjson.loads(v) for v in _values(broker.bootstrap, spec.topic, "read_committed")]
    assert [r["after"]["name"] for r in committed if r.get("after")] == ["kept1", "kept2"]


@pytest.mark.parametrize(
    "code",
    # a delivery timed out while a partition had no leader; batches a killed leader never
    # received, so the next one's sequence skips ahead (h18: "requires epoch bump")
    [KafkaError._MSG_TIMED_OUT, KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER],
    ids=["delivery-timed-out", "sequence-skipped"],
)
def test_a_broker_failure_aborts_the_barrier_and_a_new_writer_goes_on(  # type: ignore[no-untyped-def]
    broker: EmbeddedBroker, code: int
) -> None:
    """A failover's error in the bank through a cluster whose leader died: the barrier is
    aborted, the error says a new writer recovers (WriterTransientError, what `dts ingest`
    restarts on, where it stopped on a skipped sequence before), and one does. A record
    Kafka can never take is not transient: retrying it would loop forever."""
    from logstore.errors import WriterRestartError, WriterTransientError

    spec = LogSpec(unique_topic("transient"), PK_SCHEMA, ["id"], 1, changelog_mode="all")
    tid = f"transient-{uuid.uuid4().hex[:6]}"
    w = writer(broker, spec, transactional_id=tid)
    failed = KafkaError(code, txn_requires_abort=True)
    w._producer = _FailingCommits(w._producer, [failed])  # type: ignore[assignment]
    w.write(table_rows([1], "lost"))
    with pytest.raises(WriterTransientError, match="a new writer resumes at the last barrier"):
        w.barrier()
    w.close()
    again = writer(broker, spec, transactional_id=tid)
    again.write(table_rows([2], "kept"))
    again.barrier()
    too_large = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, txn_requires_abort=True)
    again._producer = _FailingCommits(again._producer, [too_large])  # type: ignore[assignment]
    again.write(table_rows([3], "refused"))
    with pytest.raises(WriterError) as refused:
        again.barrier()
    assert not isinstance(refused.value, WriterRestartError), refused.value
    again.close()
    committed = [orjson.loads(v) for v in _values(broker.bootstrap, spec.topic, "read_committed")]
    assert [r["after"]["name"] for r in committed if r.get("after")] == ["kept2"]
