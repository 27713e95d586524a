"""The pipeline against a secured broker: SASL_SSL with SCRAM-SHA-512, TLS, ACLs enforced.

The admin grants each principal its ACLs; the LogWriter (principal ``writer``) and
``dts worker`` (principal ``worker``) take their settings from a client properties file
(``DTS_KAFKA_CONFIG``), as a user's would, and the table equals what was written. A wrong
password and a principal allowed only to read a table's topic fail with errors naming
what is wrong, never showing a password.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bridge.cli import cli
from bridge.tables import log_spec_for
from logstore.acls import Acl, grant
from logstore.broker import EmbeddedBroker
from logstore.broker_security import BrokerSecurity
from logstore.errors import BrokerAuthenticationError, WriterNotAuthorizedError
from logstore.producer_transactions import transaction_cause
from logstore.reader import LogReader
from logstore.writer import LogWriter, default_transactional_id
from tests.bridge.worker.secured import (
    client_properties,
    dead_letter_acls,
    ingest_acls,
    start_secured_worker,
    worker_acls,
    writer_acls,
)
from tests.bridge.worker.support import (
    ROOT,
    Changelog,
    create_table,
    latest_barrier,
    log_writer,
    plain_records,
    produce,
    rows_at,
    tagged_rows,
    wait_for,
)

pytestmark = pytest.mark.apache_kafka


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    work = tmp_path_factory.mktemp("secured-broker")
    security = BrokerSecurity.generated("writer", "worker", "reader", "ingest")
    with EmbeddedBroker(security=security, log_path=work / "broker.log") as b:
        yield b


def _native_threads() -> int:
    """This process's threads, librdkafka's included (Python's threading sees none of them)."""
    return len(os.listdir("/proc/self/task"))


def _admin(broker: EmbeddedBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, **broker.client_settings()})


def test_pipeline_runs_with_least_privilege(
    secured: EmbeddedBroker,
    warehouse: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = create_table(warehouse, buckets=2)
    spec = log_spec_for(table)
    group = f"g-{uuid.uuid4().hex[:8]}"
    admin = _admin(secured)
    grant(admin, "writer", writer_acls(spec.topic, default_transactional_id(spec)))
    grant(admin, "worker", worker_acls(spec.topic, group))

    monkeypatch.setenv(
        "DTS_KAFKA_CONFIG", str(client_properties(secured.client_settings, "writer", tmp_path))
    )
    log = Changelog(seed=4)
    writer = log_writer(table, secured.bootstrap)
    worker = None
    try:
        barriers = produce(writer, log, barriers=3, rows_per_barrier=100)
        worker = start_secured_worker(
            secured.client_settings, warehouse, secured.bootstrap, [table.name], group, tmp_path
        )
        wait_for(lambda: latest_barrier(table) == barriers[-1], 90, "the barriers", worker)
        barriers += produce(writer, log, barriers=2, rows_per_barrier=50)
        wait_for(lambda: latest_barrier(table) == barriers[-1], 60, "the new barriers", worker)
        for b in barriers:
            assert rows_at(table, b) == log.expected(b), f"barrier {b}"
    finally:
        writer.close(final_barrier=False)
        code = worker.stop() if worker is not None else 0
    assert code == 0, worker.tail() if worker is not None else ""
    out = worker.output()
    assert "authorization failed" not in out.lower(), worker.tail()  # no ACL was missing
    assert secured.log_path is not None
    logs = out + secured.log_path.read_text(errors="replace")  # the worker's and the broker's
    for password in secured.security.users.values():  # type: ignore[union-attr]
        assert password not in logs


def test_a_wrong_password_is_refused_by_name(
    secured: EmbeddedBroker, warehouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = create_table(warehouse, buckets=1)
    wrong = "not-" + uuid.uuid4().hex
    config = client_properties(
        secured.client_settings, "writer", tmp_path, **{"sasl.password": wrong}
    )
    monkeypatch.setenv("DTS_KAFKA_CONFIG", str(config))
    with pytest.raises(
        BrokerAuthenticationError, match="refused the credentials of user 'writer'"
    ) as e:
        log_writer(table, secured.bootstrap)
    assert "SCRAM-SHA-512" in str(e.value) and wrong not in str(e.value)


def test_a_reader_cannot_write_a_tables_log(
    secured: EmbeddedBroker, warehouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = create_table(warehouse, buckets=1)
    spec = log_spec_for(table)
    admin = _admin(secured)
    grant(admin, "writer", writer_acls(spec.topic, default_transactional_id(spec)))
    grant(admin, "reader", [Acl("Topic", spec.topic, op) for op in ("DESCRIBE", "READ")])
    monkeypatch.setenv(
        "DTS_KAFKA_CONFIG", str(client_properties(secured.client_settings, "writer", tmp_path))
    )
    rows = pa.table({"id": [1], "v": ["a"], "n": [1]})
    writer = log_writer(table, secured.bootstrap)
    try:
        writer.write(rows)
        writer.barrier()
    finally:
        writer.close(final_barrier=False)

    monkeypatch.setenv(
        "DTS_KAFKA_CONFIG", str(client_properties(secured.client_settings, "reader", tmp_path))
    )
    tid = default_transactional_id(spec)
    threads = _native_threads()
    with pytest.raises(WriterNotAuthorizedError) as e:
        log_writer(table, secured.bootstrap)
    assert f"User:reader, which lacks WRITE and DESCRIBE on TransactionalId {tid!r}" in str(e.value)
    # the refused writer's Kafka client is closed, though its traceback (held by `e`)
    # still reaches the half-built writer: librdkafka's threads are gone
    wait_for(lambda: _native_threads() <= threads, 30, "the refused writer's client threads")

    # with the writer's transactional id too, the topic itself still refuses the write
    grant(admin, "reader", [Acl("TransactionalId", tid, op) for op in ("DESCRIBE", "WRITE")])
    writer = log_writer(table, secured.bootstrap)  # the barrier scan reads with READ alone
    try:
        writer.write(rows)
        with pytest.raises(WriterNotAuthorizedError) as e:
            writer.barrier()
    finally:
        writer.close(final_barrier=False)
    assert f"User:reader, which lacks WRITE on Topic {spec.topic!r}" in str(e.value)

    # the refusal reaches the client in the background, after the rows are queued: a
    # barrier closed once it has failed the transaction is refused a produce with a bare
    # "Erroneous state" (hog run h11 met it by chance), and still names the missing ACL
    writer = log_writer(table, secured.bootstrap)
    try:
        writer.write(rows)
        wait_for(lambda: _transaction_failed(writer), 30, "the topic's refusal in the client")
        with pytest.raises(WriterNotAuthorizedError) as e:
            writer.barrier()
    finally:
        writer.close(final_barrier=False)
    assert f"User:reader, which lacks WRITE on Topic {spec.topic!r}" in str(e.value)


_BARE_STATE = KafkaException(KafkaError(KafkaError._STATE, "Erroneous state"))


def _transaction_failed(writer: LogWriter) -> bool:
    """Whether the writer's open transaction has failed: ``transaction_cause`` finds its
    error then, and keeps the bare state error while it is open and sound."""
    return transaction_cause(writer._producer, _BARE_STATE) is not _BARE_STATE


def test_dts_ingest_copies_a_topic_with_least_privilege(
    secured: EmbeddedBroker, warehouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dts --kafka-config FILE ingest`: the source read in its group, the log written in
    transactions, the offsets committed with it (a second run copies nothing)."""
    table = create_table(warehouse, buckets=2)
    spec = log_spec_for(table)
    source = f"src.{uuid.uuid4().hex[:10]}"
    admin = _admin(secured)
    admin.create_topics([NewTopic(source, 2)])[source].result(timeout=30)
    rows = tagged_rows(range(1, 41), "i")
    producer = Producer({"bootstrap.servers": secured.bootstrap, **secured.client_settings()})
    for partition, value in plain_records(rows, 2, ["id"]):
        producer.produce(source, value, str(partition).encode(), partition)
    assert producer.flush(30) == 0
    grant(admin, "ingest", ingest_acls(source, spec.topic))

    config = client_properties(secured.client_settings, "ingest", tmp_path)
    monkeypatch.setenv("DTS_KAFKA_CONFIG", str(config))  # restored after the test
    args = ["--kafka-config", str(config), "ingest", "--from-topic", source, "--table", table.name]
    args += ["--warehouse", str(warehouse), "--bootstrap", secured.bootstrap, "--idle-exit", "2"]
    first = CliRunner().invoke(cli, args)
    assert first.exit_code == 0, first.output
    assert "done: 40 records" in first.output
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 0, again.output
    assert "done: 0 records" in again.output
    with LogReader(secured.bootstrap, spec, stop_at_end=True, idle_timeout_s=10) as r:
        data, _ = r.read_all()  # as the ingest principal: READ on the topic is enough
    got = pa.concat_tables([d.table for d in data])
    assert sorted(got["id"].to_pylist()) == list(range(1, 41))
    for password in secured.security.users.values():  # type: ignore[union-attr]
        assert password not in first.output + again.output


def test_dts_ingest_lenient_dead_letters_with_its_dlq_acls(
    secured: EmbeddedBroker, warehouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dts ingest --lenient` sends a record the table cannot take to ``<source>.dlq``:
    CREATE, DESCRIBE and WRITE there are all it needs beyond its ingest ACLs (without
    them it stops naming the first one it lacks)."""
    table = create_table(warehouse, buckets=1)
    spec = log_spec_for(table)
    source = f"src.{uuid.uuid4().hex[:10]}"
    admin = _admin(secured)
    admin.create_topics([NewTopic(source, 1)])[source].result(timeout=30)
    producer = Producer({"bootstrap.servers": secured.bootstrap, **secured.client_settings()})
    for partition, value in plain_records(tagged_rows(range(1, 6), "i"), 1, ["id"]):
        producer.produce(source, value, str(partition).encode(), partition)
    producer.produce(source, b"not json", b"0", 0)
    assert producer.flush(30) == 0
    grant(admin, "ingest", ingest_acls(source, spec.topic))

    config = client_properties(secured.client_settings, "ingest", tmp_path)
    monkeypatch.setenv("DTS_KAFKA_CONFIG", str(config))
    args = ["--kafka-config", str(config), "ingest", "--from-topic", source, "--table", table.name]
    args += ["--warehouse", str(warehouse), "--bootstrap", secured.bootstrap, "--idle-exit", "2"]
    args += ["--lenient"]
    refused = CliRunner().invoke(cli, args)
    assert refused.exit_code == 1, refused.output
    assert f"lacks CREATE on Topic '{source}.dlq'" in refused.output

    grant(admin, "ingest", dead_letter_acls(source))
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, done.output
    assert "done: 6 records" in done.output and "1 dead letters" in done.output, done.output
    consumer = Consumer(
        {"bootstrap.servers": secured.bootstrap, "group.id": f"c-{uuid.uuid4().hex[:6]}",
         **secured.client_settings()}
    )  # fmt: skip
    try:
        consumer.assign([TopicPartition(f"{source}.dlq", 0, 0)])
        letters = consumer.consume(1, timeout=10)  # returns on the first
    finally:
        consumer.close()
    assert [m.value() for m in letters if m.error() is None] == [b"not json"]


def test_a_worker_missing_an_acl_stops_at_start_naming_it(
    secured: EmbeddedBroker, warehouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = create_table(warehouse, buckets=1)
    spec = log_spec_for(table)
    admin = _admin(secured)
    grant(admin, "writer", writer_acls(spec.topic, default_transactional_id(spec)))
    monkeypatch.setenv(
        "DTS_KAFKA_CONFIG", str(client_properties(secured.client_settings, "writer", tmp_path))
    )
    writer = log_writer(table, secured.bootstrap)
    try:
        produce(writer, Changelog(seed=2), barriers=1, rows_per_barrier=5)
    finally:
        writer.close(final_barrier=False)
    group = f"g-{uuid.uuid4().hex[:8]}"
    config = client_properties(secured.client_settings, "worker", tmp_path)
    cmd = [sys.executable, "-m", "bridge", "--kafka-config", str(config), "worker"]
    cmd += ["--warehouse", str(warehouse), "--bootstrap", secured.bootstrap, "--group", group]
    cmd += ["--tables", table.name, "--web-port", "0"]

    def start() -> list[str]:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=90, cwd=ROOT)
        assert done.returncode != 0, done.stdout
        return [line for line in done.stderr.splitlines() if "rdkafka" not in line]

    lines = start()
    assert len(lines) == 1, lines
    assert lines[0].startswith("Error: dts worker cannot start: Kafka does not allow User:worker")
    assert f"DESCRIBE on Topic {spec.topic!r}; READ on Topic {spec.topic!r}" in lines[0]
    assert f"READ on Group {group!r}" in lines[0]

    grant(admin, "worker", [Acl("Topic", spec.topic, "READ")])
    (line,) = start()
    assert line == (
        f"Error: dts worker cannot start: Kafka does not allow User:worker READ on Group "
        f"{group!r} (ask the cluster's admin for these ACLs)"
    )


def test_the_worker_dead_letters_with_its_dlq_acls(
    secured: EmbeddedBroker, warehouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record the table cannot take goes to ``<topic>.dlq``: CREATE, DESCRIBE and WRITE
    there are all the worker needs more; the barrier around it still commits."""
    table = create_table(warehouse, buckets=1)
    spec = log_spec_for(table)
    group = f"g-{uuid.uuid4().hex[:8]}"
    admin = _admin(secured)
    grant(admin, "writer", writer_acls(spec.topic, default_transactional_id(spec)))
    grant(admin, "worker", [*worker_acls(spec.topic, group), *dead_letter_acls(spec.topic)])
    monkeypatch.setenv(
        "DTS_KAFKA_CONFIG", str(client_properties(secured.client_settings, "writer", tmp_path))
    )
    writer = log_writer(table, secured.bootstrap)
    worker = None
    try:
        writer.write(tagged_rows(range(0, 10), "w"))
        writer.barrier()
        plain = Producer({"bootstrap.servers": secured.bootstrap, **secured.client_settings()})
        plain.produce(spec.topic, b"[1, 2]", None, 0)  # not an envelope
        assert plain.flush(30) == 0
        writer.write(tagged_rows(range(10, 20), "w"))
        last = writer.barrier()
        worker = start_secured_worker(
            secured.client_settings, warehouse, secured.bootstrap, [table.name], group, tmp_path
        )
        wait_for(lambda: latest_barrier(table) == last, 60, "the last barrier", worker)
        assert [r[0] for r in rows_at(table, last)] == list(range(20))
    finally:
        writer.close(final_barrier=False)
        code = worker.stop() if worker is not None else 0
    assert code == 0, worker.tail() if worker is not None else ""
    consumer = Consumer(
        {
            "bootstrap.servers": secured.bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            **secured.client_settings(),
        }
    )
    try:
        consumer.assign([TopicPartition(spec.dlq_topic, 0, 0)])
        letters = consumer.consume(1, timeout=10)  # returns on the first
        letters += consumer.consume(10, timeout=1)  # a second would be one letter twice
    finally:
        consumer.close()
    assert [m.value() for m in letters if m.error() is None] == [b"[1, 2]"]
