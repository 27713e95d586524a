"""Spark's own Kafka source reads a table's topic from a secured broker (SASL_SSL with
SCRAM-SHA-512, TLS, ACLs) with the settings translated from one client properties file
(``spark_kafka_options``: Java names, a JAAS line, the CA as a PEM truststore), as a
principal allowed only to READ that topic, and the plan it explains shows no password."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient

from bridge.spark.kafka_rows import changelog_rows, kafka_source_options
from bridge.spark.session import spark_kafka_available, spark_kafka_jars_dir
from logstore.acls import Acl, grant
from logstore.broker import EmbeddedBroker
from logstore.broker_security import BrokerSecurity
from logstore.client_config import client_settings
from logstore.spec import LogSpec
from logstore.writer import LogWriter
from tests.bridge.worker.secured import client_properties

pytestmark = [pytest.mark.spark, pytest.mark.apache_kafka]

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    log = tmp_path_factory.mktemp("secured-broker") / "broker.log"
    with EmbeddedBroker(security=BrokerSecurity.generated("reader"), log_path=log) as b:
        yield b


def test_spark_reads_a_topic_over_sasl_ssl_as_a_reader(
    spark: Any, secured: EmbeddedBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert spark_kafka_available(), f"no Spark Kafka connector in {spark_kafka_jars_dir()}"
    spec = LogSpec(f"dts.spark.s{uuid.uuid4().hex[:8]}", SCHEMA, ["id"], 2, changelog_mode="all")
    admin_config = client_properties(secured.client_settings, "admin", tmp_path)
    monkeypatch.setenv("DTS_KAFKA_CONFIG", str(admin_config))
    rows = pa.table({"id": [1, 2], "name": ["k1", "k2"]}, schema=SCHEMA)
    with LogWriter(
        secured.bootstrap, spec, lambda t: pa.array([0, 1]), barrier_interval_s=None
    ) as w:
        w.write(rows)
        barrier = w.barrier()
    admin = AdminClient({"bootstrap.servers": secured.bootstrap, **secured.client_settings()})
    grant(admin, "reader", [Acl("Topic", spec.topic, "READ")])

    reader = client_settings(
        {"DTS_KAFKA_CONFIG": str(client_properties(secured.client_settings, "reader", tmp_path))}
    )
    options = kafka_source_options(secured.bootstrap, spec.topic, reader)
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.ssl.truststore.type"] == "PEM"
    df = spark.read.format("kafka").options(**options).load()
    got = changelog_rows(df, spec).select("id", "name", "_row_kind", "_barrier").collect()
    assert sorted(tuple(r) for r in got) == [(1, "k1", "+I", barrier), (2, "k2", "+I", barrier)]
    plan = df._jdf.queryExecution().toString()
    assert reader["sasl.password"] not in plan
