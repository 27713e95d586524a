"""A real database in (issue 41): PostgreSQL (``wal_level=logical``) through Debezium's
own PostgreSQL connector in a Kafka Connect worker from Kafka's jars, then ``dts ingest``
and ``dts worker`` into dts tables, which must equal the database's tables.

Every part is real and started here (the broker from the session, PostgreSQL from
Debian's binaries, Connect and Debezium from the jar cache), each with a bounded start
and stopped by PID. The source writes an initial snapshot's rows, then inserts, updates,
deletes and transactions that change both tables, in the types a real schema has
(``numeric`` fixed and variable scale, ``timestamptz``, ``date``, ``uuid``, an enum,
``jsonb``, ``text[]``).
"""

from __future__ import annotations

import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from bridge.tables import bucketer_for, log_spec_for
from filestore import Catalog, Table
from logstore.broker import EmbeddedBroker
from logstore.connect import ConnectWorker, postgres_connector
from logstore.ingest import Ingestor
from logstore.topics import create_topic
from tests.bridge.worker.support import latest_barrier, start_worker, wait_for
from tests.postgres import local_postgres

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

DDL = """
CREATE TYPE tier AS ENUM ('basic', 'gold', 'platinum');
CREATE TABLE customers (
    id integer PRIMARY KEY,
    name text NOT NULL,
    level tier,
    uid uuid,
    tags text[],
    profile jsonb,
    since timestamptz,
    born date
);
CREATE TABLE orders (
    id bigint PRIMARY KEY,
    customer_id integer NOT NULL,
    amount numeric(12, 2),
    ratio numeric,
    placed timestamptz
);
"""
CUSTOMERS = pa.schema(
    [
        pa.field("id", pa.int32(), nullable=False),
        ("name", pa.string()),
        ("level", pa.string()),
        ("uid", pa.string()),
        ("tags", pa.list_(pa.string())),
        ("profile", pa.string()),
        ("since", pa.timestamp("us", tz="UTC")),
        ("born", pa.date32()),
    ]
)
ORDERS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("customer_id", pa.int32()),
        ("amount", pa.decimal128(12, 2)),
        ("ratio", pa.string()),  # numeric without a scale: exact text, any scale
        ("placed", pa.timestamp("us", tz="UTC")),
    ]
)


def _execute(url: str, *statements: tuple[str, tuple[Any, ...]] | str) -> None:
    """One source transaction."""
    import psycopg

    with psycopg.connect(url) as conn, conn.cursor() as cur:
        for s in statements:
            sql, args = (s, ()) if isinstance(s, str) else s
            cur.execute(sql, args)  # type: ignore[arg-type]


def _customer(i: int) -> tuple[str, tuple[Any, ...]]:
    return (
        "INSERT INTO customers VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (
            i,
            f"customer {i}",
            ("basic", "gold", "platinum")[i % 3],
            str(uuid.UUID(int=i)),
            [f"t{i}", "x"],
            f'{{"n": {i}, "nested": {{"a": [1, 2]}}}}',
            f"2024-0{1 + i % 9}-1{i % 10} 1{i % 10}:30:00.123456+02",
            f"1990-01-{1 + i % 28:02d}",
        ),
    )


def _order(i: int, customer: int, amount: str, ratio: str) -> tuple[str, tuple[Any, ...]]:
    return (
        "INSERT INTO orders VALUES (%s, %s, %s, %s, now())",
        (i, customer, Decimal(amount), Decimal(ratio)),
    )


def _source_rows(url: str, table: str, columns: list[str]) -> list[tuple[Any, ...]]:
    """What the database holds, in dts's forms (enum, uuid, json as text; numeric
    without scale as its exact text)."""
    import psycopg

    casts = {
        "level": "level::text",
        "uid": "uid::text",
        "profile": "profile::text",
        "ratio": "ratio::text",
    }
    cols = ", ".join(casts.get(c, c) for c in columns)
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {cols} FROM {table} ORDER BY id")
        return [tuple(_normal(v) for v in row) for row in cur.fetchall()]


def _dts_rows(table: Table, columns: list[str]) -> list[tuple[Any, ...]]:
    rows = table.read(columns=columns).sort_by("id").to_pylist()
    return [tuple(_normal(r[c]) for c in columns) for r in rows]


def pg_connector(
    url: str, name: str, tables: list[str], prefix: str, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """Debezium's connector for the test database at ``url`` (as dts reads it best), with
    ``extra`` settings."""
    return postgres_connector(
        name,
        host="127.0.0.1",
        port=int(url.rsplit(":", 1)[1].split("/")[0]),
        user="postgres",
        dbname="postgres",
        tables=tables,
        topic_prefix=prefix,
        extra=extra,
    )


def _ingestor(broker: EmbeddedBroker, topic: str, table: Table, **options: Any) -> Ingestor:
    """An ingest of ``topic`` into ``table``'s log."""
    return Ingestor(broker.bootstrap, topic, log_spec_for(table), bucketer_for(table), **options)


def _exist(broker: EmbeddedBroker, topics: list[str]) -> bool:
    from confluent_kafka.admin import AdminClient

    known = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=5).topics
    return all(t in known for t in topics)


def _first_value(broker: EmbeddedBroker, topic: str) -> Any:
    """The first record of a topic, parsed (numbers as Python floats: only to look)."""
    import orjson
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "peek", "log_level": 3})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        msg = c.poll(30)
        assert msg is not None and msg.error() is None and msg.value()
        return orjson.loads(msg.value())
    finally:
        c.close()


def _normal(v: Any) -> Any:
    import json

    if isinstance(v, str) and v.startswith("{"):
        return json.loads(v)  # jsonb text: the database's spacing, not Debezium's
    return v


def test_postgres_through_debezium_equals_the_database(
    broker: EmbeddedBroker, warehouse: Path, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:6]
    with local_postgres(logical=True) as url:
        _execute(url, DDL)
        _execute(url, *(_customer(i) for i in range(1, 21)))
        _execute(url, *(_order(i, 1 + i % 20, f"{i}.5{i % 10}", f"0.{i}") for i in range(1, 41)))
        prefix = f"pg{run}"
        connector = pg_connector(url, f"pg-{run}", ["public.customers", "public.orders"], prefix)
        catalog = Catalog(str(warehouse))
        tables = {
            "customers": catalog.create_table(
                f"db.customers_{run}", CUSTOMERS, primary_key=["id"], options={"bucket": "2"}
            ),
            "orders": catalog.create_table(
                f"db.orders_{run}", ORDERS, primary_key=["id"], options={"bucket": "2"}
            ),
        }
        with ConnectWorker(broker.bootstrap, connector, work_dir=tmp_path / "connect") as connect:
            assert connect.status()["connector"]["state"] == "RUNNING"
            # streaming after the snapshot: updates, deletes, transactions over both tables
            _execute(
                url,
                "UPDATE customers SET name = 'renamed', tags = ARRAY['a', 'b', 'c'] WHERE id = 3",
                "UPDATE orders SET amount = 99.99, ratio = 1.000000000001 WHERE id = 7",
            )
            _execute(
                url,
                "DELETE FROM orders WHERE id IN (1, 2, 3)",
                "DELETE FROM customers WHERE id = 20",
            )
            _execute(url, _customer(21), _order(41, 21, "12345.67", "3.14159265358979"))
            topics = [f"{prefix}.public.{n}" for n in tables] + [f"{prefix}.transaction"]
            wait_for(lambda: _exist(broker, topics), 90, "the connector's topics", None)
            ingest = {
                name: _ingestor(
                    broker,
                    f"{prefix}.public.{name}",
                    t,
                    barrier_interval_s=0.5,
                    transaction_topic=f"{prefix}.transaction",
                )
                for name, t in tables.items()
            }
            with ThreadPoolExecutor(2) as pool:
                runs = {n: pool.submit(i.run, idle_exit_s=8) for n, i in ingest.items()}
                stats = {n: r.result(timeout=180) for n, r in runs.items()}
            for i in ingest.values():
                i.close()
            for name, st in stats.items():  # the snapshot and the changes, nothing refused
                assert st.rows > 0 and st.barriers > 0 and st.dead_letters == 0, (name, st)
        worker = start_worker(
            warehouse, broker.bootstrap, [t.name for t in tables.values()], f"g-{run}", tmp_path
        )
        try:
            for t in tables.values():
                wait_for(lambda t=t: latest_barrier(t) is not None, 90, t.name, worker)
                # the last barrier the ingest wrote is the one committed last
                wait_for(
                    lambda t=t: worker.table_status(t.name).get("lag_records") == 0,
                    90,
                    t.name,
                    worker,
                )
            for name, t in tables.items():
                cols = t.schema.column_names
                assert _dts_rows(t, cols) == _source_rows(url, name, cols), (name, stats[name])
        finally:
            code = worker.stop()
        assert code == 0, worker.tail()


def compose_healthcheck(service: str) -> list[str]:
    """A docker-compose.postgres.yml service's healthcheck command, to run here."""
    import yaml

    doc = yaml.safe_load((Path(__file__).parents[2] / "docker-compose.postgres.yml").read_text())
    test = list(doc["services"][service]["healthcheck"]["test"])
    assert test[0] == "CMD" and test[1] == "python"
    return [sys.executable, *test[2:]]


def test_dts_connect_postgres_runs_the_connector_and_stops_on_ctrl_c(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    import json
    import signal
    import subprocess
    import sys
    import urllib.request

    from logstore.localhost import free_port

    port = free_port()
    with local_postgres(logical=True) as url:
        _execute(url, DDL)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bridge",
                "connect",
                "postgres",
                "--dsn",
                url,
                "--tables",
                "public.customers",
                "--topic-prefix",
                "try",
                "--bootstrap",
                broker.bootstrap,
                "--data",
                str(tmp_path / "connect"),
                "--rest-port",
                str(port),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()  # printed once the connector's task runs
            assert first.startswith("Kafka Connect REST: http://127.0.0.1:"), first
            rest = first.split()[3]
            assert rest == f"http://127.0.0.1:{port}"
            with urllib.request.urlopen(f"{rest}/connectors/dts-postgres/status") as r:
                assert json.loads(r.read())["tasks"][0]["state"] == "RUNNING"
            # docker-compose.postgres.yml's healthcheck of this command, as it runs there
            check = [a.replace(":8083/", f":{port}/") for a in compose_healthcheck("connect")]
            assert subprocess.run(check, timeout=30).returncode == 0
            assert (
                "try.public.customers -> dts ingest"
                in proc.stdout.readline() + proc.stdout.readline()
            )
            proc.send_signal(signal.SIGINT)
            _out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err
    assert "connect stopped" in err
    assert subprocess.run(check, capture_output=True, timeout=30).returncode != 0  # it can fail


def test_an_unchanged_toasted_value_is_never_stored_as_the_placeholder(
    broker: EmbeddedBroker, warehouse: Path, tmp_path: Path
) -> None:
    """An update under REPLICA IDENTITY DEFAULT that leaves a TOASTed text unchanged comes
    without its value: the ingest refuses it (to the dead-letter topic, naming the ways
    out) rather than store Debezium's placeholder; under REPLICA IDENTITY FULL the same
    update comes whole; with log.unavailable-values=keep-current the placeholder goes to
    the log and the worker keeps the current value. The last two equal the database."""
    import random
    import string

    from confluent_kafka import Consumer, TopicPartition

    from logstore.unavailable import PLACEHOLDER

    run = uuid.uuid4().hex[:6]
    big = "".join(random.Random(1).choices(string.ascii_letters, k=20_000))  # not compressible
    schema = pa.schema(
        [pa.field("id", pa.int32(), nullable=False), ("n", pa.int32()), ("doc", pa.string())]
    )
    with local_postgres(logical=True) as url:
        _execute(
            url,
            "CREATE TABLE docs (id integer PRIMARY KEY, n integer, doc text)",
            "CREATE TABLE full_docs (id integer PRIMARY KEY, n integer, doc text)",
            "ALTER TABLE full_docs REPLICA IDENTITY FULL",
            "CREATE TABLE keep_docs (id integer PRIMARY KEY, n integer, doc text)",
            ("INSERT INTO docs VALUES (1, 0, %s)", (big,)),
            ("INSERT INTO full_docs VALUES (1, 0, %s)", (big,)),
            ("INSERT INTO keep_docs VALUES (1, 0, %s), (2, 0, %s)", (big, big[::-1])),
        )
        prefix = f"toast{run}"
        names = ["docs", "full_docs", "keep_docs"]
        connector = pg_connector(url, f"toast-{run}", [f"public.{n}" for n in names], prefix)
        catalog = Catalog(str(warehouse))
        keep = {"log.unavailable-values": "keep-current", "bucket": "2"}
        tables = {
            name: catalog.create_table(
                f"db.{name}_{run}",
                schema,
                primary_key=["id"],
                options=keep if "keep" in name else {},
            )
            for name in names
        }
        with ConnectWorker(broker.bootstrap, connector, work_dir=tmp_path / "connect"):
            _execute(url, "UPDATE docs SET n = 1", "UPDATE full_docs SET n = 1")
            # unchanged twice in one transaction, then changed, then unchanged again
            _execute(url, "UPDATE keep_docs SET n = 1", "UPDATE keep_docs SET n = n + 1")
            _execute(url, "UPDATE keep_docs SET doc = 'small' WHERE id = 2")
            _execute(url, "UPDATE keep_docs SET n = 10 + n")
            topics = [f"{prefix}.public.{n}" for n in tables]
            wait_for(lambda: _exist(broker, topics), 90, "the connector's topics", None)
            for name, t in tables.items():
                ingest = _ingestor(
                    broker, f"{prefix}.public.{name}", t, barrier_interval_s=0.2, lenient=True
                )
                stats = ingest.run(idle_exit_s=6)
                ingest.close()
                assert stats.dead_letters == (1 if name == "docs" else 0), (name, stats)
        keep_rows = _source_rows(url, "keep_docs", ["id", "n", "doc"])
    worker = start_worker(
        warehouse, broker.bootstrap, [t.name for t in tables.values()], f"g-{run}", tmp_path
    )
    try:
        for t in tables.values():
            wait_for(lambda t=t: worker.table_status(t.name).get("lag_records") == 0, 90, t.name)
            wait_for(lambda t=t: latest_barrier(t) is not None, 90, t.name, worker)
    finally:
        assert worker.stop() == 0, worker.tail()
    # the snapshot's row stands in docs (its update refused); full_docs has the update
    assert tables["docs"].read().to_pylist() == [{"id": 1, "n": 0, "doc": big}]
    assert tables["full_docs"].read().to_pylist() == [{"id": 1, "n": 1, "doc": big}]
    # keep_docs equals the database: the TOASTed text kept, never the placeholder
    assert _dts_rows(tables["keep_docs"], ["id", "n", "doc"]) == keep_rows
    assert keep_rows == [(1, 12, big), (2, 12, "small")]
    dlq = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"dlq-{run}"})
    try:
        dlq.assign([TopicPartition(f"{prefix}.public.docs.dlq", 0, 0)])
        msg = dlq.poll(30)
        assert msg is not None and msg.error() is None
        reason = dict(msg.headers() or [])
        assert PLACEHOLDER.encode() in msg.value() and any(
            b"REPLICA IDENTITY FULL" in v for v in reason.values()
        ), reason
    finally:
        dlq.close()


def test_numeric_decimals_as_json_numbers_equal_the_database(
    broker: EmbeddedBroker, warehouse: Path, tmp_path: Path
) -> None:
    """``decimal.handling.mode=precise`` with the JsonConverter's ``decimal.format=NUMERIC``:
    decimals arrive as JSON numbers (up to 38 digits) and are read exactly."""
    run = uuid.uuid4().hex[:6]
    schema = pa.schema(
        [
            pa.field("id", pa.int32(), nullable=False),
            ("big", pa.decimal128(38, 10)),
            ("money", pa.decimal128(12, 2)),
        ]
    )
    rows = [
        (1, "1234567890123456789012345678.0123456789", "0.10"),
        (2, "-0.0000000001", "-99999.99"),
        (3, None, "1.00"),
    ]
    with local_postgres(logical=True) as url:
        _execute(
            url,
            "CREATE TABLE amounts (id integer PRIMARY KEY, big numeric(38, 10), money numeric(12, 2))",
            *(("INSERT INTO amounts VALUES (%s, %s, %s)", r) for r in rows),
        )
        prefix = f"num{run}"
        connector = pg_connector(url, f"num-{run}", ["public.amounts"], prefix)
        connector.update(
            {
                "decimal.handling.mode": "precise",
                "value.converter": "org.apache.kafka.connect.json.JsonConverter",
                "value.converter.schemas.enable": "true",
                "value.converter.decimal.format": "NUMERIC",
            }
        )
        table = Catalog(str(warehouse)).create_table(
            f"db.amounts_{run}", schema, primary_key=["id"]
        )
        with ConnectWorker(broker.bootstrap, connector, work_dir=tmp_path / "connect"):
            _execute(url, "UPDATE amounts SET money = money + 0.01 WHERE id = 1")
            wait_for(lambda: _exist(broker, [f"{prefix}.public.amounts"]), 90, "topic", None)
            first = _first_value(broker, f"{prefix}.public.amounts")
            assert isinstance(first["payload"]["after"]["money"], float), first  # a JSON number
            ingest = _ingestor(broker, f"{prefix}.public.amounts", table, barrier_interval_s=0.2)
            stats = ingest.run(idle_exit_s=6)
            ingest.close()
            assert stats.rows > 0 and stats.dead_letters == 0, stats
        worker = start_worker(warehouse, broker.bootstrap, [table.name], f"g-{run}", tmp_path)
        try:
            wait_for(lambda: worker.table_status(table.name).get("lag_records") == 0, 90, "lag")
            wait_for(lambda: latest_barrier(table) is not None, 90, table.name, worker)
        finally:
            assert worker.stop() == 0, worker.tail()
        cols = ["id", "big", "money"]
        assert _dts_rows(table, cols) == _source_rows(url, "amounts", cols)


def test_truncate_key_updates_nulls_and_more_types_equal_the_database(
    broker: EmbeddedBroker, warehouse: Path, tmp_path: Path
) -> None:
    """What else a real connector sends: ``real``, ``double precision``, ``smallint``,
    ``boolean``, ``char``, ``varchar``, ``bytea``, ``time``, ``timestamp``,
    ``numeric(38,10)``, ``integer[]`` (with a NULL element), NULL in every column, an
    update of the primary key, deletes under ``REPLICA IDENTITY FULL``, and ``TRUNCATE``
    followed by new rows: the table equals the database after each phase."""
    run = uuid.uuid4().hex[:6]
    schema = pa.schema(
        [
            pa.field("id", pa.int32(), nullable=False),
            ("r", pa.float32()),
            ("d", pa.float64()),
            ("s", pa.int16()),
            ("b", pa.bool_()),
            ("c", pa.string()),
            ("raw", pa.binary()),
            ("t", pa.time64("us")),
            ("ts", pa.timestamp("us")),
            ("v", pa.string()),
            ("big", pa.decimal128(38, 10)),
            ("ints", pa.list_(pa.int32())),
        ]
    )
    insert = "INSERT INTO kinds VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    with local_postgres(logical=True) as url:
        _execute(
            url,
            "CREATE TABLE kinds (id integer PRIMARY KEY, r real, d double precision, "
            "s smallint, b boolean, c char(3), raw bytea, t time, ts timestamp, "
            "v varchar(20), big numeric(38, 10), ints integer[])",
            "ALTER TABLE kinds REPLICA IDENTITY FULL",
            (
                insert,
                (
                    1,
                    1.5,
                    2.25,
                    7,
                    True,
                    "ab",
                    b"\x00\xff",
                    "12:34:56.789",
                    "2024-02-29 01:02:03.456789",
                    "varying",
                    Decimal("1234567890123456789012345678.0123456789"),
                    [1, None, 3],
                ),
            ),
            (insert, (2, *([None] * 11))),
        )
        prefix = f"kinds{run}"
        table = Catalog(str(warehouse)).create_table(f"db.kinds_{run}", schema, primary_key=["id"])
        worker = start_worker(warehouse, broker.bootstrap, [table.name], f"g-{run}", tmp_path)
        cols = schema.names
        casts = ", ".join(cols)

        def source() -> list[tuple[Any, ...]]:
            import psycopg

            with psycopg.connect(url) as conn, conn.cursor() as cur:
                cur.execute(f"SELECT {casts} FROM kinds ORDER BY id")
                return [
                    tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                    for row in cur.fetchall()
                ]

        try:
            connector = pg_connector(url, f"kinds-{run}", ["public.kinds"], prefix)
            with ConnectWorker(broker.bootstrap, connector, work_dir=tmp_path / "connect"):
                wait_for(lambda: _exist(broker, [f"{prefix}.public.kinds"]), 90, "topic", None)
                ingest = _ingestor(broker, f"{prefix}.public.kinds", table, barrier_interval_s=0.2)
                with ThreadPoolExecutor(1) as pool:
                    running = pool.submit(ingest.run, idle_exit_s=20)
                    phases = [
                        ("UPDATE kinds SET id = 10 WHERE id = 1",),  # the key moves
                        ("DELETE FROM kinds WHERE id = 2",),  # under REPLICA IDENTITY FULL
                        (
                            "TRUNCATE kinds",
                            (
                                insert,
                                (
                                    3,
                                    -0.5,
                                    1e300,
                                    -32768,
                                    False,
                                    "xyz",
                                    b"",
                                    "00:00:00",
                                    "1970-01-01 00:00:00",
                                    "",
                                    Decimal("-0.0000000001"),
                                    [],
                                ),
                            ),
                        ),
                    ]
                    for phase in [(), *phases]:
                        if phase:
                            _execute(url, *phase)
                        expected = source()
                        wait_for(
                            lambda e=expected: _dts_rows(table, cols) == e, 90, str(phase), worker
                        )
                    stats = running.result(timeout=120)
                ingest.close()
                assert stats.truncates >= 1 and stats.dead_letters == 0, stats
        finally:
            assert worker.stop() == 0, worker.tail()


def test_columns_added_and_dropped_while_streaming_through_dts_ingest(
    broker: EmbeddedBroker, warehouse: Path, tmp_path: Path
) -> None:
    """``dts ingest --topic-prefix ... --evolve-schema`` as a user runs it: ``ADD COLUMN``
    while streaming adds the column to the dts table, typed by the event's schema (the
    new rows carry it, the older ones read null); after ``DROP COLUMN`` the dts table
    keeps the column, and every row written since reads null there (the source no longer
    has a value), the rows before keep theirs."""
    import signal
    import subprocess
    import sys

    run = uuid.uuid4().hex[:6]
    prefix = f"ddl{run}"
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False), ("name", pa.string())])
    with local_postgres(logical=True) as url:
        _execute(
            url,
            "CREATE TABLE items (id integer PRIMARY KEY, name text)",
            "INSERT INTO items VALUES (1, 'one'), (2, 'two')",
        )
        for topic in ("public.items", "transaction"):
            create_topic(broker.bootstrap, f"{prefix}.{topic}", 1, {})
        table = Catalog(str(warehouse)).create_table(f"db.items_{run}", schema, primary_key=["id"])
        worker = start_worker(warehouse, broker.bootstrap, [table.name], f"g-{run}", tmp_path)
        connector = pg_connector(url, f"ddl-{run}", ["public.items"], prefix)
        log = open(tmp_path / "ingest.log", "wb")  # noqa: SIM115 (closed below)
        ingest = subprocess.Popen(
            [
                *(sys.executable, "-m", "bridge", "ingest", "--topic-prefix", prefix),
                *("--tables", f"public.items={table.name}", "--evolve-schema"),
                *("--warehouse", str(warehouse), "--bootstrap", broker.bootstrap),
                *("--barrier-interval", "0.2"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )

        def rows() -> list[dict[str, Any]]:
            return sorted(table.read().to_pylist(), key=lambda r: r["id"])

        try:
            with ConnectWorker(broker.bootstrap, connector, work_dir=tmp_path / "connect"):
                wait_for(lambda: len(rows()) == 2, 90, "the snapshot", worker)
                _execute(
                    url,
                    "ALTER TABLE items ADD COLUMN price numeric(10, 2)",
                    "INSERT INTO items VALUES (3, 'three', 3.50)",
                )
                wait_for(lambda: len(rows()) == 3, 90, "the row with the new column", worker)
                # the type the event's schema gives: numeric as exact text, the connector's
                # decimal.handling.mode=string (dts connect's setting)
                assert table.schema.arrow_schema.field("price").type == pa.string()
                assert [r.get("price") for r in rows()] == [None, None, "3.50"]
                _execute(
                    url,
                    "ALTER TABLE items DROP COLUMN name",
                    "INSERT INTO items VALUES (4, 4.00)",
                    "UPDATE items SET price = 1.00 WHERE id = 1",
                )
                wait_for(
                    lambda: len(rows()) == 4 and rows()[0]["price"] is not None, 90, "drop", worker
                )
                names = {r["id"]: r["name"] for r in rows()}
                assert names == {1: None, 2: "two", 3: "three", 4: None}  # written since: null
        finally:
            ingest.send_signal(signal.SIGINT)
            code = ingest.wait(timeout=60)
            log.close()
            assert worker.stop() == 0, worker.tail()
        out = (tmp_path / "ingest.log").read_text()
        assert code == 0, out
        assert "schema: added price string" in out, out


def _values(bootstrap: str, topic: str) -> list[Any]:
    """Every record of a one-partition topic so far, parsed."""
    import orjson
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "peek", "log_level": 3})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, low)])
        out: list[Any] = []
        while len(out) < high - low:
            msgs = c.consume(1000, timeout=10)
            assert msgs, f"{topic}: {len(out)} of {high - low} records read"
            out += [orjson.loads(m.value()) if m.value() else None for m in msgs]
        return out
    finally:
        c.close()


def test_heartbeats_and_transactions_without_the_tables_rows_hold_no_barrier_back(
    broker: EmbeddedBroker, warehouse: Path, tmp_path: Path
) -> None:
    """Between the table's changes the database commits transactions that touch only a
    table dts does not take, transactional logical messages, and the connector sends
    heartbeats every 200 ms. Each change of the table is in a closed barrier while that
    traffic goes on (not only when the ingest stops), and the table equals the database."""
    run = uuid.uuid4().hex[:6]
    prefix = f"hb{run}"
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False), ("v", pa.string())])
    table = Catalog(str(warehouse)).create_table(f"db.watched_{run}", schema, primary_key=["id"])
    changes = 5
    with local_postgres(logical=True) as url:
        _execute(
            url,
            "CREATE TABLE watched (id integer PRIMARY KEY, v text)",
            "CREATE TABLE other (id integer PRIMARY KEY, v text)",
        )
        for topic in ("public.watched", "transaction"):
            create_topic(broker.bootstrap, f"{prefix}.{topic}", 1, {})
        connector = pg_connector(
            url, f"hb-{run}", ["public.watched"], prefix, {"heartbeat.interval.ms": "200"}
        )
        ingest = _ingestor(
            broker,
            f"{prefix}.public.watched",
            table,
            barrier_interval_s=0.2,
            transaction_topic=f"{prefix}.transaction",
            collection="public.watched",
        )
        closed: list[int] = []  # rows copied at each barrier
        stop = threading.Event()
        with (
            ConnectWorker(broker.bootstrap, connector, work_dir=tmp_path / "connect"),
            ThreadPoolExecutor(1) as pool,
        ):
            running = pool.submit(ingest.run, stop, on_barrier=lambda st: closed.append(st.rows))
            try:
                for k in range(changes):
                    for j in range(5):  # the database's other traffic
                        n = k * 5 + j
                        _execute(url, ("INSERT INTO other VALUES (%s, 'x')", (n,)))
                        _execute(url, "SELECT pg_logical_emit_message(true, 'dts', 'm')")
                    _execute(url, ("INSERT INTO watched VALUES (%s, 'v')", (k,)))
                    _execute(url, ("INSERT INTO other VALUES (%s, 'after')", (1000 + k,)))
                    # its barrier closes while the traffic after it goes on
                    wait_for(lambda k=k: bool(closed) and closed[-1] > k, 60, f"change {k}")
            finally:
                stop.set()
            stats = running.result(timeout=60)
        ingest.close()
        assert stats.rows == changes and stats.dead_letters == 0, stats
        # the traffic was there: heartbeats, and transaction events of no change of ours
        assert _values(broker.bootstrap, f"__debezium-heartbeat.{prefix}")
        ends = [v for v in _values(broker.bootstrap, f"{prefix}.transaction") if v]
        foreign = [
            e
            for e in (e.get("payload", e) for e in ends)
            if e.get("status") == "END"
            and not any(
                c.get("data_collection") == "public.watched" and c.get("event_count")
                for c in e.get("data_collections") or []
            )
        ]
        print(f"\n{len(ends)} transaction events, {len(foreign)} ENDs with no change of ours")
        assert foreign, ends  # the logical messages' transactions
        worker = start_worker(warehouse, broker.bootstrap, [table.name], f"g-{run}", tmp_path)
        try:
            wait_for(lambda: worker.table_status(table.name).get("lag_records") == 0, 90, "lag")
            wait_for(lambda: latest_barrier(table) is not None, 90, table.name, worker)
        finally:
            assert worker.stop() == 0, worker.tail()
        cols = ["id", "v"]
        assert _dts_rows(table, cols) == _source_rows(url, "watched", cols)
