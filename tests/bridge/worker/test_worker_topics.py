"""The worker creates a table's topic (partitions = buckets) before subscribing to it."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from bridge.tables import log_spec_for
from bridge.worker.metrics import WorkerMetrics
from bridge.worker.tiers import TopicGate
from logstore.topics import create_topic, describe_topic
from tests.bridge.worker.support import (
    Changelog,
    create_table,
    latest_barrier,
    log_writer,
    produce,
    rows_at,
    start_worker,
    wait_for,
)

pytestmark = pytest.mark.kafka


def test_worker_started_before_any_producer_creates_the_topic(  # type: ignore[no-untyped-def]
    broker, warehouse: Path, tmp_path: Path
) -> None:
    table = create_table(warehouse, buckets=2)
    topic = log_spec_for(table).topic
    assert describe_topic(broker.bootstrap, topic, with_config=False) is None
    w = start_worker(
        warehouse, broker.bootstrap, [table.name], f"g-{uuid.uuid4().hex[:8]}", tmp_path
    )
    writer = None
    try:
        # the worker, not a subscription's auto-creation, makes the topic: 2 partitions
        wait_for(
            lambda: describe_topic(broker.bootstrap, topic, with_config=False) is not None,
            30,
            "the worker to create the topic",
            w,
        )
        info = describe_topic(broker.bootstrap, topic, with_config=False)
        assert info is not None and info.partitions == 2
        log = Changelog(seed=11)
        writer = log_writer(table, broker.bootstrap)
        barriers = produce(writer, log, barriers=2, rows_per_barrier=60)
        wait_for(lambda: latest_barrier(table) == barriers[-1], 60, "the snapshots", w)
        for b in barriers:
            assert rows_at(table, b) == log.expected(b), f"barrier {b}"
        info = describe_topic(broker.bootstrap, topic, with_config=False)
        assert info is not None and info.partitions == 2
    finally:
        if writer is not None:
            writer.close(final_barrier=False)
        code = w.stop()
    assert code == 0, w.tail()


def test_a_topic_with_another_partition_count_refuses_only_its_table(  # type: ignore[no-untyped-def]
    broker, warehouse: Path
) -> None:
    bad, good = create_table(warehouse, buckets=2), create_table(warehouse, buckets=2)
    assert create_topic(broker.bootstrap, log_spec_for(bad).topic, 3, {})
    metrics = WorkerMetrics(job="g")
    gate = TopicGate(broker.bootstrap, metrics)

    assert [t.name for t in gate.admit([bad, good])] == [good.name]
    assert "has 3 partitions but the table has 2 buckets" in gate.refused[bad.name]
    info = describe_topic(broker.bootstrap, log_spec_for(good).topic, with_config=False)
    assert info is not None and info.partitions == 2
    # a later scan retries the refused table without counting (or logging) it again
    assert gate.admit([bad]) == []
    assert metrics.tables_refused.labels(bad.name, "g")._value.get() == 1
