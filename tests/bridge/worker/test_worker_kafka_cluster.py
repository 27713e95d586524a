"""A three-node Kafka cluster (KRaft, replication factor 3, min.insync.replicas 2) with faults.

The log writer, `dts ingest` of a Debezium topic, two `dts worker` processes and a Spark
log-tier stream into a derived table run while the leader of the table's partitions, then
the active controller, is killed (SIGKILL) and restarted. Everything continues by itself
and ends exact: every barrier of the written table has one snapshot, equal to the
oracle; the ingested table holds the source's final state; the derived table's snapshot
of every source barrier it carries equals the oracle (nothing lost, nothing duplicated).
Real processes throughout."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from logstore.cluster import KafkaCluster
from tests.bridge.worker.support import (
    ROOT,
    BackgroundProducer,
    Changelog,
    assert_all_barriers_match,
    commit_latency,
    create_table,
    latest_barrier,
    log_writer,
    rows_at,
    start_worker,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

REPLICATED = {"log.replication-factor": "3", "log.min-insync-replicas": "2"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with KafkaCluster(3, data_dir=tmp_path_factory.mktemp("kafka-cluster")) as c:
        yield c


def _stall(
    cluster: KafkaCluster,
    victim: int,
    producer: BackgroundProducer,
    committed: Callable[[], int | None],
    what: str,
) -> float:
    """Kill ``victim``; return how long until a barrier written after the kill is committed
    to the table (the pipeline's stall, end to end); restart the node."""
    written = producer.barriers[-1]
    cluster.kill(victim)
    t0 = time.monotonic()
    wait_for(lambda: (committed() or 0) > written, 120, f"a new barrier after killing {what}")
    stalled = time.monotonic() - t0
    cluster.start_node(victim)
    # and again once the node is back (it rejoins the ISR, leadership may move back)
    back = producer.barriers[-1]
    wait_for(lambda: (committed() or 0) > back, 120, f"a new barrier after restarting {what}")
    return stalled


class DebeziumSource:
    """Debezium change events (c/u/d, key in the record key) on a replicated topic, with
    the state they leave, produced in the background until stopped."""

    def __init__(self, bootstrap: str, topic: str, seed: int) -> None:
        from logstore.topics import create_topic

        create_topic(bootstrap, topic, 1, {"min.insync.replicas": "2"}, replication_factor=3)
        self.topic = topic
        self.state: dict[int, tuple[str, int]] = {}
        self._rng = random.Random(seed)
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.sent = 0

    def _event(self, key: int) -> bytes:
        self.sent += 1
        old = self.state.get(key)
        before = None if old is None else {"id": key, "v": old[0], "n": old[1]}
        if old is not None and self._rng.random() < 0.2:
            del self.state[key]
            return orjson.dumps({"payload": {"before": before, "after": None, "op": "d"}})
        value = (f"e{self.sent}", self.sent)
        self.state[key] = value
        after = {"id": key, "v": value[0], "n": value[1]}
        op = "c" if old is None else "u"
        return orjson.dumps({"payload": {"before": before, "after": after, "op": op}})

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(50):
                key = self._rng.randrange(200)
                self._producer.produce(self.topic, self._event(key), orjson.dumps({"id": key}))
            self._producer.poll(0)
            self._stop.wait(0.3)

    def __enter__(self) -> DebeziumSource:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert self._producer.flush(120) == 0, "source events not delivered"

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def expected(self) -> list[tuple[int, str, int]]:
        return sorted((k, v, n) for k, (v, n) in self.state.items())


def _start_ingest(
    cluster: KafkaCluster, warehouse: Path, topic: str, table: str, logs: Path
) -> Any:
    out = open(logs / "ingest.log", "wb")  # noqa: SIM115 (closed with the process)
    cmd = [sys.executable, "-m", "bridge", "ingest", "--from-topic", topic, "--table", table]
    cmd += ["--warehouse", str(warehouse), "--bootstrap", cluster.bootstrap]
    cmd += ["--barrier-interval", "0.3", "--group", f"ingest-{uuid.uuid4().hex[:6]}"]
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


def _interrupt(proc: Any) -> int:
    """Ctrl-C a process; killed (and reported as such) when it does not stop in a minute."""
    proc.send_signal(signal.SIGINT)
    try:
        return int(proc.wait(timeout=60))
    except subprocess.TimeoutExpired:
        proc.kill()
        return int(proc.wait())


def _derive(
    spark: Any, cluster: KafkaCluster, warehouse: Path, source: str, target: str, ck: Path
) -> Any:
    """A Spark stream of ``source``'s log tier upserted into ``target`` (FileStore)."""
    return (
        spark.readStream.format("dts")
        .option("warehouse", str(warehouse))
        .option("tier", "log")
        .option("bootstrap", cluster.bootstrap)
        .load(source)
        .writeStream.format("dts")
        .option("warehouse", str(warehouse))
        .option("checkpointLocation", str(ck))
        .trigger(processingTime="500 milliseconds")
        .start(target)
    )


@pytest.mark.parametrize("options", [REPLICATED, {}], ids=["table-options", "cluster-default"])
def test_topics_are_replicated_on_every_node(
    cluster: KafkaCluster, warehouse: Path, options: dict[str, str]
) -> None:
    """With the table's replication options, and without them: the cluster's own default
    (a fixed factor of 1 failed every write where brokers require 2 in-sync replicas)."""
    from confluent_kafka.admin import AdminClient

    table = create_table(warehouse, buckets=2, options=options)
    writer = log_writer(table, cluster.bootstrap)
    writer.barrier()  # a transactional write the in-sync replicas acknowledge
    writer.close(final_barrier=False)
    topic = table.options.log_topic(table.name)
    meta = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=10)
    partitions = meta.topics[topic].partitions
    assert len(partitions) == 2
    for p in partitions.values():
        assert sorted(p.replicas) == [1, 2, 3] and sorted(p.isrs) == [1, 2, 3]
    assert cluster.leader(topic) in (1, 2, 3) and cluster.controller() in (1, 2, 3)


def test_leader_and_controller_killed_while_everything_runs(  # type: ignore[no-untyped-def]
    cluster: KafkaCluster, spark, warehouse: Path, tmp_path: Path
) -> None:
    table = create_table(warehouse, buckets=4, options=REPLICATED)
    ingested = create_table(warehouse, buckets=2, options=REPLICATED)
    derived = create_table(warehouse, buckets=2, options={"change-tracking": "false"})
    topic = table.options.log_topic(table.name)
    log = Changelog(seed=26)
    writer = log_writer(table, cluster.bootstrap)
    group = f"g-{uuid.uuid4().hex[:8]}"
    tables = [table.name, ingested.name]
    stalls: dict[str, float] = {}
    source = DebeziumSource(cluster.bootstrap, f"dbz-{uuid.uuid4().hex[:6]}", seed=24)
    # a barrier a second: every barrier is a snapshot, and barriers that pile up while
    # Spark and four JVMs start on two busy cores are committed one by one before the
    # first measurement can see a new one (0.3 s left 60 s of backlog in CI)
    with BackgroundProducer(writer, log, rows=300, pause_s=1.0) as producer, source:
        ingest = _start_ingest(cluster, warehouse, source.topic, ingested.name, tmp_path)
        a = start_worker(warehouse, cluster.bootstrap, tables, group, tmp_path)
        b = start_worker(warehouse, cluster.bootstrap, tables, group, tmp_path)
        stream = _derive(spark, cluster, warehouse, table.name, derived.name, tmp_path / "ck")
        try:
            wait_for(lambda: latest_barrier(table) is not None, 90, "first commit", a)
            wait_for(lambda: latest_barrier(derived) is not None, 180, "first derived commit")
            committed = lambda: latest_barrier(table)  # noqa: E731
            # what a barrier takes end to end with every node up, for comparison
            stalls["none killed"] = commit_latency(producer, committed)
            stalls["partition leader"] = _stall(
                cluster, cluster.leader(topic), producer, committed, "the partition leader"
            )
            stalls["controller"] = _stall(
                cluster, cluster.controller(), producer, committed, "the controller"
            )
            barriers = producer.stop()
            source.stop()
            wait_for(lambda: latest_barrier(table) == barriers[-1], 120, "every barrier", a)
            try:
                wait_for(
                    lambda: latest_barrier(derived) == barriers[-1],
                    120,
                    "the derived table caught up",
                )
            except AssertionError as e:
                raise AssertionError(
                    f"{e}: derived at {latest_barrier(derived)}, source at {barriers[-1]}, "
                    f"stream {stream.status}, error {stream.exception()}, "
                    f"last progress {stream.lastProgress}"
                ) from None
            try:
                wait_for(
                    lambda: rows_at(ingested, latest_barrier(ingested) or 0) == source.expected(),
                    120,
                    "the ingested table at the source's final state",
                    a,
                )
            except AssertionError as e:  # where the ingest stood says why
                tail = (tmp_path / "ingest.log").read_text(errors="replace")[-3000:]
                raise AssertionError(
                    f"{e}\ningest (exit {ingest.poll()}), its log's tail:\n{tail}"
                ) from None
            assert stream.exception() is None
        finally:
            stream.stop()
            code_ingest = _interrupt(ingest)
            code_b = b.stop()
            code_a = a.stop()
    writer.close(final_barrier=False)
    ingest_log = (tmp_path / "ingest.log").read_text(errors="replace")
    restarts = ingest_log.count("restarting the ingest")
    figures = ", ".join(f"{k} {v:.1f}s" for k, v in stalls.items())
    print(
        f"stall until a barrier written after the kill is committed: {figures}; "
        f"{len(barriers)} barriers, {source.sent} source events, ingest restarts {restarts}",
        flush=True,
    )
    assert (code_a, code_b) == (0, 0), a.tail() + "\n" + b.tail()
    assert code_ingest == 0, ingest_log[-3000:]
    assert_all_barriers_match(table, log, barriers)
    carried = [s.barrier for s in derived.snapshots() if s.barrier is not None]
    assert carried and set(carried) <= set(barriers)
    for barrier in carried:
        assert rows_at(derived, barrier) == log.expected(barrier), f"derived at {barrier}"


def test_dts_broker_nodes_3_prints_every_address_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge", "broker", "--nodes", "3", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the cluster serves (bounded below)
        assert line.startswith("bootstrap: "), proc.stderr.read() if proc.stderr else line
        assert len(line.split()[1].split(",")) == 3
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
