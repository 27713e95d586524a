"""The secured pipeline on a three-node cluster: SASL_SSL/SCRAM-SHA-512 between clients and
brokers and between the brokers, one CA for every node, ACLs enforced; the LogWriter and
`dts worker` with their least-privilege ACLs, the table equal to what was written."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from bridge.tables import log_spec_for
from logstore.acls import grant
from logstore.broker_security import BrokerSecurity
from logstore.cluster import KafkaCluster
from logstore.writer import default_transactional_id
from tests.bridge.worker.secured import (
    client_properties,
    start_secured_worker,
    worker_acls,
    writer_acls,
)
from tests.bridge.worker.support import (
    Changelog,
    create_table,
    latest_barrier,
    log_writer,
    produce,
    rows_at,
    wait_for,
)

pytestmark = [pytest.mark.apache_kafka, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    security = BrokerSecurity.generated("writer", "worker")
    root = tmp_path_factory.mktemp("secured-cluster")
    with KafkaCluster(3, data_dir=root, security=security) as c:
        yield c


def test_secured_cluster_pipeline(
    cluster: KafkaCluster, warehouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cluster.root is not None
    cas = {b.tls.ca for b in cluster.brokers.values() if b.tls is not None}
    assert cas == {cluster.root / "tls" / "ca.pem"}  # one CA for every node
    table = create_table(warehouse, buckets=2, options={"log.min-insync-replicas": "2"})
    spec = log_spec_for(table)
    group = f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **cluster.client_settings()})
    grant(admin, "writer", writer_acls(spec.topic, default_transactional_id(spec)))
    grant(admin, "worker", worker_acls(spec.topic, group))

    writer_config = client_properties(cluster.client_settings, "writer", tmp_path)
    monkeypatch.setenv("DTS_KAFKA_CONFIG", str(writer_config))
    log = Changelog(seed=7)
    writer = log_writer(table, cluster.bootstrap)
    worker = None
    try:
        barriers = produce(writer, log, barriers=3, rows_per_barrier=100)
        # every node holds a replica: the brokers replicate to each other over SASL_SSL
        topic = admin.list_topics(spec.topic, timeout=10).topics[spec.topic]
        assert all(len(p.isrs) == 3 for p in topic.partitions.values())
        worker = start_secured_worker(
            cluster.client_settings, warehouse, cluster.bootstrap, [table.name], group, tmp_path
        )
        wait_for(lambda: latest_barrier(table) == barriers[-1], 120, "the barriers", worker)
        for b in barriers:
            assert rows_at(table, b) == log.expected(b), f"barrier {b}"
    finally:
        writer.close(final_barrier=False)
        code = worker.stop() if worker is not None else 0
    assert code == 0, worker.tail() if worker is not None else ""
    assert "authorization failed" not in worker.output().lower(), worker.tail()
