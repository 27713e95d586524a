"""`dts broker` and `dts ingest` (exactly-once copy of a Debezium topic) on real parts."""

from __future__ import annotations

import base64
import decimal
import gc
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bridge.cli import cli
from bridge.tables import log_spec_for, open_log_writer
from filestore import Catalog
from logstore.broker import EmbeddedBroker
from logstore.errors import BadSourceRecord, BrokerStartError
from logstore.ingest import Ingestor
from logstore.reader import LogReader
from logstore.topics import create_topic
from tests.logstore.support import unique_topic

pytestmark = pytest.mark.kafka
REPO = Path(__file__).resolve().parents[2]
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("day", pa.date32())])


@pytest.mark.apache_kafka
def test_dts_broker_starts_prints_bootstrap_and_stops_on_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bridge",
            "broker",
            "--port",
            "0",
            "--data",
            str(tmp_path / "b"),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("bootstrap: 127.0.0.1:"), line
        bootstrap = line.split()[1]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert admin.list_topics(timeout=10).brokers
        admin.create_topics([NewTopic("kept", 2, 1)])["kept"].result(timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Apache Kafka started in" in err and "broker stopped" in err
    assert (tmp_path / "b" / "broker.log").exists()
    # --data keeps the KRaft log directory, topics included
    assert (tmp_path / "b" / "kraft-logs" / "meta.properties").exists()
    assert (tmp_path / "b" / "kraft-logs" / "kept-1").is_dir()


def test_broker_without_jars_says_which_make_target_fetches_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DTS_KAFKA_JARS", str(tmp_path / "empty"))
    with pytest.raises(BrokerStartError, match=r"make kafka-jars"):
        EmbeddedBroker().start()


def test_broker_without_java_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrokerStartError, match=r"Java is not installed"):
        EmbeddedBroker().start()


def _debezium(
    op: str, before: dict | None, after: dict | None, include_schema: bool = False
) -> bytes:
    env = {
        "before": before,
        "after": after,
        "op": op,
        "ts_ms": 1,
        "source": {"connector": "postgresql"},
    }
    return orjson.dumps({"schema": {"type": "struct"}, "payload": env} if include_schema else env)


def _produce_source(bootstrap: str, topic: str, values: list[tuple[int, bytes]]) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for key, value in values:
        p.produce(topic, value, orjson.dumps({"id": key}), key % 3)
    p.flush(10)


def _read_log(bootstrap: str, table) -> pa.Table:  # type: ignore[no-untyped-def]
    spec = log_spec_for(table)
    with LogReader(bootstrap, spec, stop_at_end=True, idle_timeout_s=10) as r:
        data, _ = r.read_all()
    return (
        pa.concat_tables([d.table for d in data])
        if data
        else pa.table({"id": pa.array([], pa.int64())})
    )


def _committed(bootstrap: str, group: str, topic: str) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return [
            tp.offset
            for tp in c.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
        ]
    finally:
        c.close()


def test_dts_ingest_copies_exactly_once_with_barriers(
    broker: EmbeddedBroker, warehouse: Path
) -> None:
    name = f"db.{unique_topic('ing').split('.')[-1]}"
    table = Catalog(str(warehouse)).create_table(
        name, SCHEMA, primary_key=["id"], options={"bucket": "2", "log.changelog-mode": "all"}
    )
    source = unique_topic("src")
    create_topic(broker.bootstrap, source, 3, {})
    row = lambda i, n: {"id": i, "name": n, "day": "2024-01-0" + str(1 + i % 9)}  # noqa: E731
    _produce_source(
        broker.bootstrap,
        source,
        [(i, _debezium("c", None, row(i, "v1"), include_schema=i % 2 == 0)) for i in range(6)]
        + [(1, _debezium("u", row(1, "v1"), row(1, "v2"))), (2, _debezium("d", row(2, "v1"), None))]
        + [(4, b"{not json")],
    )
    args = ["ingest", "--from-topic", source, "--table", name, "--warehouse", str(warehouse)]
    args += [
        "--bootstrap",
        broker.bootstrap,
        "--lenient",
        "--idle-exit",
        "2",
        "--barrier-interval",
        "0.2",
    ]
    gc.unfreeze()
    try:
        result = CliRunner().invoke(cli, args)
        # start-up's objects were frozen before the copy (bridge.commands.heap)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    assert result.exit_code == 0, result.output
    assert "9 records" in result.output and "1 dead letters" in result.output

    log = _read_log(broker.bootstrap, table)
    got = sorted(
        zip(
            log["id"].to_pylist(),
            log["name"].to_pylist(),
            log["_row_kind"].to_pylist(),
            strict=True,
        )
    )
    want = sorted(
        [(i, "v1", "+I") for i in range(6)] + [(1, "v1", "-U"), (1, "v2", "+U"), (2, "v1", "-D")]
    )
    assert got == want
    assert log["_barrier"].null_count == 0

    # a second run finds its offsets committed with the log: nothing is copied twice
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 0, again.output
    assert "done: 0 records" in again.output
    _produce_source(broker.bootstrap, source, [(7, _debezium("r", None, row(7, "snap")))])
    third = CliRunner().invoke(cli, args)
    assert "done: 1 records" in third.output
    assert sorted(_read_log(broker.bootstrap, table)["id"].to_pylist()) == sorted(
        [i for i, *_ in want] + [7]
    )


def test_ingest_stops_at_a_bad_record_after_committing_what_precedes_it(
    broker: EmbeddedBroker, warehouse: Path
) -> None:
    name = f"db.{unique_topic('ingx').split('.')[-1]}"
    table = Catalog(str(warehouse)).create_table(
        name, SCHEMA, primary_key=["id"], options={"bucket": "2"}
    )
    spec = log_spec_for(table)
    source = unique_topic("srcx")
    create_topic(broker.bootstrap, source, 3, {})
    good = [(i, _debezium("c", None, {"id": i, "name": "x", "day": None})) for i in range(9)]
    _produce_source(broker.bootstrap, source, [*good, (0, b'{"op": "c", "after": {"id": "zero"}}')])
    from bridge.tables import bucketer_for

    strict = Ingestor(broker.bootstrap, source, spec, bucketer_for(table), barrier_interval_s=60)
    with pytest.raises(BadSourceRecord, match=r"wrong type.*--lenient") as err:
        strict.run(idle_exit_s=3)
    strict.close()
    assert (err.value.partition, err.value.offset) == (0, 3)  # keys 0, 3, 6 come first
    # everything before it is committed once, with the offsets: partition 0 stops at it
    assert sorted(_read_log(broker.bootstrap, table)["id"].to_pylist()) == list(range(9))
    assert _committed(broker.bootstrap, strict.group_id, source) == [3, 3, 3]

    again = Ingestor(broker.bootstrap, source, spec, bucketer_for(table), barrier_interval_s=60)
    with pytest.raises(BadSourceRecord):  # a rerun stops at the same record, copying nothing
        again.run(idle_exit_s=3)
    again.close()
    assert _read_log(broker.bootstrap, table).num_rows == 9

    lenient = Ingestor(
        broker.bootstrap, source, spec, bucketer_for(table), barrier_interval_s=0.2, lenient=True
    )
    stats = lenient.run(idle_exit_s=2)
    lenient.close()
    assert stats.dead_letters == 1 and stats.rows == 0
    assert sorted(_read_log(broker.bootstrap, table)["id"].to_pylist()) == list(range(9))
    assert sum(_committed(broker.bootstrap, lenient.group_id, source)) == 10


def test_dts_ingest_names_the_bad_record_and_the_way_on(
    broker: EmbeddedBroker, warehouse: Path
) -> None:
    name = f"db.{unique_topic('ingb').split('.')[-1]}"
    Catalog(str(warehouse)).create_table(name, SCHEMA, primary_key=["id"], options={"bucket": "1"})
    source = unique_topic("srcb")
    create_topic(broker.bootstrap, source, 3, {})
    _produce_source(broker.bootstrap, source, [(0, _debezium("c", None, {"id": 0})), (3, b"[1]")])
    args = ["ingest", "--from-topic", source, "--table", name, "--warehouse", str(warehouse)]
    result = CliRunner().invoke(cli, [*args, "--bootstrap", broker.bootstrap, "--idle-exit", "2"])
    assert result.exit_code == 1
    assert f"bad record at {source}[0]@1" in result.output
    assert "not a debezium envelope" in result.output and "--lenient" in result.output


def test_open_log_writer_uses_the_filestore_bucket(broker: EmbeddedBroker, warehouse: Path) -> None:
    from filestore.format.bucket import bucket_ids

    name = f"db.{unique_topic('tw').split('.')[-1]}"
    table = Catalog(str(warehouse)).create_table(
        name, SCHEMA, primary_key=["id"], options={"bucket": "4"}
    )
    rows = pa.table(
        {
            "id": pa.array(range(40), pa.int64()),
            "name": ["n"] * 40,
            "day": pa.nulls(40, pa.date32()),
        }
    )
    with open_log_writer(table, broker.bootstrap, barrier_interval_s=None) as w:
        w.write(rows)
        b = w.barrier()
    with LogReader(broker.bootstrap, log_spec_for(table), until_barrier=b, idle_timeout_s=10) as r:
        data, _ = r.read_all()
    log = pa.concat_tables([d.table for d in data]).sort_by("id")
    assert log["_partition"].to_pylist() == bucket_ids(rows, ["id"], 4).tolist()
    assert time.time() > 0


def _b64_decimal(value: str, scale: int) -> str:
    unscaled = int(decimal.Decimal(value).scaleb(scale))
    n = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(n, "big", signed=True)).decode()


def test_dts_ingest_reads_precise_decimals_exactly_never_as_numbers(
    broker: EmbeddedBroker, warehouse: Path
) -> None:
    """Debezium's default decimal.handling.mode=precise, no schema in the value: the
    base64 text "9876" (-5368.38) is decoded at the table's scale, not read as 9876.
    With --decimal-mode string the same table reads decimal text."""
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), ("amount", pa.decimal128(20, 2))]
    )
    amounts = ["-5368.38", "123456789012345678.91", "0.00", "-0.01"]
    for mode, wire in (("precise", lambda a: _b64_decimal(a, 2)), ("string", str)):
        name = f"db.{unique_topic('dec').split('.')[-1]}"
        table = Catalog(str(warehouse)).create_table(name, schema, primary_key=["id"])
        source = unique_topic("src")
        create_topic(broker.bootstrap, source, 3, {})
        _produce_source(
            broker.bootstrap,
            source,
            [
                (i, _debezium("c", None, {"id": i, "amount": wire(a)}))
                for i, a in enumerate(amounts)
            ],
        )
        args = ["ingest", "--from-topic", source, "--table", name, "--warehouse", str(warehouse)]
        args += ["--bootstrap", broker.bootstrap, "--idle-exit", "2", "--decimal-mode", mode]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        log = _read_log(broker.bootstrap, table)
        got = dict(zip(log["id"].to_pylist(), log["amount"].to_pylist(), strict=True))
        assert got == {i: decimal.Decimal(a) for i, a in enumerate(amounts)}, mode


def _start_secure_broker(data: Path) -> tuple[subprocess.Popen[str], list[str]]:
    """`dts broker --secure --user app --data DATA` and its first four lines: bootstrap, CA,
    the admin's and app's client properties files."""
    cmd = [sys.executable, "-m", "bridge", "broker", "--port", "0", "--secure"]
    proc = subprocess.Popen(
        [*cmd, "--user", "app", "--data", str(data)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out: list[str] = []
    assert proc.stdout is not None
    while len(out) < 4:
        line = proc.stdout.readline()  # the broker's start-up bounds this (60 s)
        if not line:
            proc.kill()
            _, err = proc.communicate(timeout=30)
            raise AssertionError(f"dts broker ended: {err}")
        out.append(line.strip())
    return proc, out


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    rest, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return str(rest) + str(err)


@pytest.mark.apache_kafka
def test_dts_broker_secure_prints_the_ca_and_client_settings_never_a_password(
    tmp_path: Path,
) -> None:
    """`dts broker --secure`: SASL_SSL only, the admin's settings work, a user has none yet;
    restarted on its --data, the same credentials and topics."""
    from logstore.client_config import client_settings

    data = tmp_path / "b"
    proc, out = _start_secure_broker(data)
    printed = ""
    try:
        bootstrap = out[0].removeprefix("bootstrap: ")
        assert out[1] == f"ca: {data / 'tls' / 'ca.pem'}"
        admin_props = Path(out[2].removeprefix("client properties: "))
        app_props = Path(out[3].removeprefix("client properties (app): "))
        admin = client_settings({"DTS_KAFKA_CONFIG": str(admin_props)})
        assert admin["security.protocol"] == "SASL_SSL"
        assert admin["sasl.mechanism"] == "SCRAM-SHA-512"
        admin_client = AdminClient({"bootstrap.servers": bootstrap, **admin})
        admin_client.create_topics([NewTopic("kept", 1, 1)])["kept"].result(timeout=30)
        app = client_settings({"DTS_KAFKA_CONFIG": str(app_props)})
        assert app["sasl.username"] == "app"
        # authenticated, but no ACL lets app see or make anything
        app_admin = AdminClient({"bootstrap.servers": bootstrap, **app})
        assert app_admin.list_topics(timeout=10).topics == {}
        plain = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        with pytest.raises(KafkaException):  # no plaintext listener at all
            plain.list_topics(timeout=3)
    finally:
        printed += "\n".join(out) + _stop(proc)
    # restarted on its data: the credentials it was formatted with, the topic it had
    proc, out = _start_secure_broker(data)
    try:
        again = client_settings({"DTS_KAFKA_CONFIG": out[2].removeprefix("client properties: ")})
        assert again == admin
        restarted = AdminClient({"bootstrap.servers": out[0].removeprefix("bootstrap: "), **again})
        assert "kept" in restarted.list_topics(timeout=10).topics
    finally:
        printed += "\n".join(out) + _stop(proc)
    for password in (admin["sasl.password"], app["sasl.password"]):
        assert password not in printed
    assert oct(admin_props.stat().st_mode & 0o777) == "0o600"
