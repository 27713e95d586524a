"""A three-node Kafka cluster (KRaft, replication factor 3, min.insync.replicas 2) with faults:
the log writer and two `dts worker` processes run while the leader of the table's
partitions, then the active controller, is killed (SIGKILL) and restarted. Everything
continues by itself and the FileStore ends exact: every barrier has one snapshot, equal
to the oracle (nothing lost, nothing duplicated). Real processes throughout."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from logstore.cluster import KafkaCluster
from tests.bridge.worker.support import (
    ROOT,
    BackgroundProducer,
    Changelog,
    assert_all_barriers_match,
    create_table,
    latest_barrier,
    log_writer,
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


def _latency(producer: BackgroundProducer, committed: Callable[[], int | None]) -> float:
    written = producer.barriers[-1]
    t0 = time.monotonic()
    wait_for(lambda: (committed() or 0) > written, 60, "a new barrier committed")
    return time.monotonic() - t0


def test_topics_are_replicated_on_every_node(cluster: KafkaCluster, warehouse: Path) -> None:
    from confluent_kafka.admin import AdminClient

    table = create_table(warehouse, buckets=2, options=REPLICATED)
    writer = log_writer(table, cluster.bootstrap)
    writer.close(final_barrier=False)
    topic = table.options.log_topic(table.name)
    meta = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=10)
    partitions = meta.topics[topic].partitions
    assert len(partitions) == 2
    for p in partitions.values():
        assert sorted(p.replicas) == [1, 2, 3] and sorted(p.isrs) == [1, 2, 3]
    assert cluster.leader(topic) in (1, 2, 3) and cluster.controller() in (1, 2, 3)


def test_leader_and_controller_killed_while_two_workers_run(
    cluster: KafkaCluster, warehouse: Path, tmp_path: Path
) -> None:
    table = create_table(warehouse, buckets=4, options=REPLICATED)
    topic = table.options.log_topic(table.name)
    log = Changelog(seed=26)
    writer = log_writer(table, cluster.bootstrap)
    group = f"g-{uuid.uuid4().hex[:8]}"
    stalls: dict[str, float] = {}
    with BackgroundProducer(writer, log, rows=100, pause_s=0.3) as producer:
        a = start_worker(warehouse, cluster.bootstrap, [table.name], group, tmp_path)
        b = start_worker(warehouse, cluster.bootstrap, [table.name], group, tmp_path)
        try:
            wait_for(lambda: latest_barrier(table) is not None, 90, "first commit", a)
            committed = lambda: latest_barrier(table)  # noqa: E731
            # what a barrier takes end to end with every node up, for comparison
            stalls["none killed"] = _latency(producer, committed)
            leader = cluster.leader(topic)
            stalls["partition leader"] = _stall(
                cluster, leader, producer, committed, "the partition leader"
            )
            controller = cluster.controller()
            stalls["controller"] = _stall(
                cluster, controller, producer, committed, "the controller"
            )
            barriers = producer.stop()
            wait_for(lambda: latest_barrier(table) == barriers[-1], 120, "every barrier", a)
        finally:
            code_b = b.stop()
            code_a = a.stop()
    writer.close(final_barrier=False)
    figures = ", ".join(f"{k} {v:.1f}s" for k, v in stalls.items())
    print(
        f"stall until a barrier written after the kill is committed: {figures}; "
        f"{len(barriers)} barriers, {sum(1 for _ in log.oracle)} closed",
        flush=True,
    )
    assert (code_a, code_b) == (0, 0), a.tail() + "\n" + b.tail()
    assert_all_barriers_match(table, log, barriers)


def test_dts_broker_nodes_3_prints_every_address_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge.cli", "broker", "--nodes", "3", "--port", "0"],
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
