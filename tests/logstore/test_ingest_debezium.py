"""`dts ingest` of change events in Debezium 2.x's real JsonConverter shapes (issue 24),
through a real broker: MySQL and PostgreSQL ``source`` blocks, with the schema in the value.
"""

from __future__ import annotations

import decimal
from pathlib import Path

import orjson
from click.testing import CliRunner

from bridge.cli import cli
from filestore import Catalog
from logstore.broker import EmbeddedBroker
from logstore.topics import create_topic
from tests.logstore.support import unique_topic
from tests.logstore.test_logstore_cli import _produce_source, _read_log
from tests.logstore.test_logstore_debezium import DECIMAL38_FIELDS, DECIMAL_ONLY, b64_decimal

AMOUNT_FIELD = DECIMAL38_FIELDS[1]  # decimal(38, 2), as a Debezium schema names it
MYSQL_SOURCE = {
    "version": "2.7.3.Final",
    "connector": "mysql",
    "name": "dbserver1",
    "ts_ms": 1732460000000,
    "snapshot": "false",
    "db": "inventory",
    "sequence": None,
    "table": "payments",
    "server_id": 223344,
    "gtid": None,
    "file": "mysql-bin.000003",
    "pos": 805,
    "row": 0,
    "thread": 7,
    "query": None,
}
PG_SOURCE = {
    "version": "2.7.3.Final",
    "connector": "postgresql",
    "name": "pgserver1",
    "ts_ms": 1732460000000,
    "snapshot": "false",
    "db": "inventory",
    "sequence": '["24023928","24023928"]',
    "schema": "public",
    "table": "payments",
    "txId": 555,
    "lsn": 24023928,
    "xmin": None,
}
SNAPSHOT_ENUM = {
    "type": "string",
    "optional": True,
    "name": "io.debezium.data.Enum",
    "version": 1,
    "parameters": {"allowed": "true,last,false,incremental"},
    "default": "false",
    "field": "snapshot",
}


def _envelope_schema(connector: str) -> dict:
    image = {
        "type": "struct",
        "optional": True,
        "name": f"{connector}server1.inventory.payments.Value",
        "fields": [{"type": "int64", "optional": False, "field": "id"}, AMOUNT_FIELD],
    }
    source = {
        "type": "struct",
        "optional": False,
        "name": f"io.debezium.connector.{connector}.Source",
        "field": "source",
        "fields": [
            {"type": "string", "optional": False, "field": "version"},
            {"type": "string", "optional": False, "field": "connector"},
            {"type": "int64", "optional": False, "field": "ts_ms"},
            SNAPSHOT_ENUM,
            {"type": "string", "optional": False, "field": "db"},
            {"type": "string", "optional": False, "field": "table"},
        ],
    }
    transaction = {
        "type": "struct",
        "optional": True,
        "name": "event.block",
        "version": 1,
        "field": "transaction",
        "fields": [
            {"type": "string", "optional": False, "field": "id"},
            {"type": "int64", "optional": False, "field": "total_order"},
            {"type": "int64", "optional": False, "field": "data_collection_order"},
        ],
    }
    return {
        "type": "struct",
        "optional": False,
        "name": f"{connector}server1.inventory.payments.Envelope",
        "version": 2,
        "fields": [
            {**image, "field": "before"},
            {**image, "field": "after"},
            source,
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            {"type": "int64", "optional": True, "field": "ts_us"},
            {"type": "int64", "optional": True, "field": "ts_ns"},
            transaction,
        ],
    }


def _event(connector: str, i: int, amount: str) -> bytes:
    payload = {
        "before": None,
        "after": {"id": i, "amount": b64_decimal(amount, 2)},
        "source": MYSQL_SOURCE if connector == "mysql" else PG_SOURCE,
        "op": "c",
        "ts_ms": 1732460000123,
        "ts_us": 1732460000123456,
        "ts_ns": 1732460000123456789,
        "transaction": None,
    }
    return orjson.dumps({"schema": _envelope_schema(connector), "payload": payload})


# Negative, zero, one byte, wider than int64 unscaled, and the 38-digit decimal128 limit;
# "-5368.38" is base64 "/0KJ"-like text that the old code could not read.
AMOUNTS = ["-5368.38", "0.00", "1.27", "-0.01", "123456789012345678901.23", "9" * 36 + ".99"]


def test_ingest_reads_precise_decimals_from_the_schema_without_temporal_columns(
    broker: EmbeddedBroker, warehouse: Path
) -> None:
    name = f"db.{unique_topic('dec').split('.')[-1]}"
    table = Catalog(str(warehouse)).create_table(
        name, DECIMAL_ONLY, primary_key=["id"], options={"bucket": "2"}
    )
    source = unique_topic("srcdec")
    create_topic(broker.bootstrap, source, 3, {})
    events = [(i, _event("mysql", i, a)) for i, a in enumerate(AMOUNTS)]
    n = len(AMOUNTS)
    events += [(n + i, _event("postgresql", n + i, a)) for i, a in enumerate(AMOUNTS)]
    _produce_source(broker.bootstrap, source, events)
    args = ["ingest", "--from-topic", source, "--table", name, "--warehouse", str(warehouse)]
    args += ["--bootstrap", broker.bootstrap, "--idle-exit", "2", "--barrier-interval", "0.2"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert f"{2 * n} records" in result.output

    log = _read_log(broker.bootstrap, table)
    got = sorted(zip(log["id"].to_pylist(), log["amount"].to_pylist(), strict=True))
    want = [(i, decimal.Decimal(a)) for i, a in enumerate(AMOUNTS + AMOUNTS)]
    assert got == want
