"""Kafka client settings reach every client: a real Apache Kafka broker that demands SASL.

The broker's client listener is SASL_PLAINTEXT/PLAIN: a client without the settings
cannot even list topics. With the settings in ``DTS_KAFKA_*`` the topics admin, the
LogWriter (and its barrier scan), the LogReader and the DLQ work; aiokafka (the Faust
worker's transport) connects with ``aiokafka_settings()``; Spark's own Kafka source
reads with ``spark_kafka_options()``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from test_logstore_broker import PK_SCHEMA, table_rows

from logstore.broker import EmbeddedBroker
from logstore.client_config import (
    aiokafka_settings,
    client_settings,
    confluent_config,
    faust_settings,
    java_client_properties,
    spark_kafka_options,
)
from logstore.errors import ClientConfigError
from logstore.reader import LogReader
from logstore.spec import LogSpec
from logstore.writer import LogWriter
from tests.logstore.support import bucketer_for, unique_topic

USERS = {"admin": "admin-secret", "dts": 'p"w\\d'}


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    log = tmp_path_factory.mktemp("sasl-broker") / "broker.log"
    with EmbeddedBroker(log_path=log, sasl_users=USERS) as b:
        yield b


def _dts_user() -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "dts",
        "sasl.password": USERS["dts"],
    }


@pytest.fixture
def dts_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """The settings as a user gives them: a properties file plus one environment variable."""
    settings = _dts_user()
    props = tmp_path / "kafka.properties"
    props.write_text(
        "# dts on the secured cluster\n"
        + "".join(f"{k}={v}\n" for k, v in settings.items() if k != "sasl.password")
    )
    monkeypatch.setenv("DTS_KAFKA_CONFIG", str(props))
    monkeypatch.setenv("DTS_KAFKA_SASL_PASSWORD", settings["sasl.password"])
    return settings


def test_settings_from_file_and_environment(dts_settings: dict[str, str]) -> None:
    assert client_settings() == dts_settings
    cfg = confluent_config("h:1", {"linger.ms": 5, "sasl.username": "x"}, {"group.id": "g"})
    # defaults < settings < the caller's overrides
    assert cfg["sasl.username"] == "dts" and cfg["linger.ms"] == 5 and cfg["group.id"] == "g"


def test_unreadable_or_untranslatable_settings_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_SSL\nsasl.password hunter2-secret\n")
    monkeypatch.setenv("DTS_KAFKA_CONFIG", str(bad))
    with pytest.raises(ClientConfigError, match=r"bad.properties:2: expected key=value") as e:
        client_settings()
    assert "hunter2" not in str(e.value)  # the malformed line may be a password's
    with pytest.raises(ClientConfigError, match="no aiokafka equivalent"):
        aiokafka_settings({"security.protocol": "SASL_SSL", "socket.keepalive.enable": "true"})
    with pytest.raises(ClientConfigError, match="GSSAPI"):
        java_client_properties({"sasl.mechanism": "GSSAPI", "sasl.username": "u"})


@pytest.mark.apache_kafka
def test_without_settings_the_secured_broker_refuses(sasl_broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": sasl_broker.bootstrap, "log_level": 0})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)


@pytest.mark.apache_kafka
def test_writer_reader_dlq_and_topics_use_the_settings(
    sasl_broker: EmbeddedBroker, dts_settings: dict[str, str]
) -> None:
    spec = LogSpec(unique_topic("sasl"), PK_SCHEMA, ["id"], 2, changelog_mode="all")
    with LogWriter(
        sasl_broker.bootstrap, spec, bucketer_for(spec), barrier_interval_s=None
    ) as w:  # topics admin, producer, barrier scan
        w.write(table_rows([1, 2, 3], "s"))
        b = w.barrier()
    # a plain producer with the same settings writes a bad record beside it
    bad = Producer(confluent_config(sasl_broker.bootstrap))
    bad.produce(spec.topic, b"not json", orjson.dumps({"id": 9}), 0)
    assert bad.flush(10) == 0
    with LogWriter(sasl_broker.bootstrap, spec, bucketer_for(spec), barrier_interval_s=None) as w:
        assert w.last_barrier == b  # the restarted writer's scan authenticated too
        b2 = w.barrier()
    with LogReader(
        sasl_broker.bootstrap, spec, until_barrier=b2, lenient=True, idle_timeout_s=20
    ) as r:
        data, _ = r.read_all()
        assert r.dlq_count == 1  # the DLQ producer authenticated
    got = pa.concat_tables([d.table for d in data])
    assert sorted(got["name"].to_pylist()) == ["s1", "s2", "s3"]


@pytest.mark.apache_kafka
def test_aiokafka_connects_with_the_translated_settings(
    sasl_broker: EmbeddedBroker, dts_settings: dict[str, str]
) -> None:
    """What the Faust worker's transport gets: aiokafka keyword arguments, and Faust credentials."""
    from aiokafka import AIOKafkaConsumer

    kw = aiokafka_settings()
    assert kw["security_protocol"] == "SASL_PLAINTEXT" and kw["sasl_mechanism"] == "PLAIN"
    creds = faust_settings()["broker_credentials"]
    assert creds.username == "dts" and creds.password == USERS["dts"]

    async def topics(**extra: Any) -> set[str]:
        c = AIOKafkaConsumer(bootstrap_servers=sasl_broker.bootstrap, **extra)
        await asyncio.wait_for(c.start(), 30)
        try:
            return set(await c.topics())
        finally:
            await c.stop()

    spec = LogSpec(unique_topic("aio"), PK_SCHEMA, ["id"], 1)
    with LogWriter(sasl_broker.bootstrap, spec, bucketer_for(spec), barrier_interval_s=None):
        pass
    assert spec.topic in asyncio.run(topics(**kw))


@pytest.mark.spark
@pytest.mark.apache_kafka
def test_spark_kafka_source_with_the_translated_settings(
    spark: Any, sasl_broker: EmbeddedBroker, dts_settings: dict[str, str]
) -> None:
    from bridge.spark.kafka_rows import changelog_rows, kafka_source_options
    from bridge.spark.session import spark_kafka_available

    assert spark_kafka_available(), "run `make spark-kafka-jars`"
    opts = spark_kafka_options()
    assert 'username="dts"' in opts["kafka.sasl.jaas.config"]
    spec = LogSpec(
        unique_topic(f"spark{uuid.uuid4().hex[:4]}"), PK_SCHEMA, ["id"], 2, changelog_mode="all"
    )
    with LogWriter(sasl_broker.bootstrap, spec, bucketer_for(spec), barrier_interval_s=None) as w:
        w.write(table_rows([1, 2], "k"))
        b = w.barrier()
    df = (
        spark.read.format("kafka")
        .options(**kafka_source_options(sasl_broker.bootstrap, spec.topic, dts_settings))
        .load()
    )
    rows = changelog_rows(df, spec).select("id", "name", "_row_kind", "_barrier").collect()
    assert sorted(tuple(r) for r in rows) == [(1, "k1", "+I", b), (2, "k2", "+I", b)]
