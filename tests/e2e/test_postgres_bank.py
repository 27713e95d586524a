"""The promise for a database source (issue 41): every strong consistent read across two
tables fed by one PostgreSQL database shows the database at one committed transaction.

A bank in PostgreSQL: ``accounts(id, balance numeric(18,2))`` and ``transfers(id,
from_id, to_id, amount, at)``; each transaction moves money between two accounts and
records the transfer, beside single-table writes that change no balance. Debezium's
connector (in Kafka Connect) feeds two pipelines at once:

- one ``dts ingest`` for the database (both topics, the transaction topic, one barrier
  sequence), whose tables are read with strong consistent reads across both;
- two per-topic ingests (the way before), whose tables are read at their latest
  snapshots, the best a reader of independently committed tables can do.

Every read checks the bank's invariants: the total balance never changes, and every
balance is its opening balance plus what its transfers moved. The dts reads must show no
violation; the per-topic reads' violations are counted and printed. A third of the way,
the Connect worker is SIGKILLed and restarted: it sends again what it produced after its
last flushed offset. Half way, PostgreSQL restarts (fast shutdown: the bank's open
transaction rolls back and is tried again; the connector reconnects). Two thirds of the way, the database's ``dts ingest`` is SIGKILLed
(in the middle of a barrier) and started again. No table may show a duplicate or a loss;
in the end every table equals ``SELECT`` from PostgreSQL. The same bank runs once more on
a three-broker cluster whose partition leader is killed while the database is written.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient

from bridge.consistency_read import consistent_read_tables
from bridge.meta.errors import NoConsistentVersion
from filestore import Catalog, Table
from logstore.broker import EmbeddedBroker
from logstore.cluster import KafkaCluster
from logstore.connect import ConnectWorker
from logstore.topics import create_topic
from tests.bridge.demo.runs import wait_for_output
from tests.bridge.worker.support import start_worker, wait_for
from tests.e2e.test_postgres_debezium import pg_connector
from tests.postgres import PostgresServer, postgres_server

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ACCOUNTS = 40
OPENING = Decimal("1000.00")
TRANSFERS = 500
READS = 200  # at least, most of them while the bank writes
DDL = f"""
CREATE TABLE accounts (id integer PRIMARY KEY, balance numeric(18, 2) NOT NULL);
CREATE TABLE transfers (
    id bigint PRIMARY KEY,
    from_id integer NOT NULL,
    to_id integer NOT NULL,
    amount numeric(18, 2) NOT NULL,
    at timestamptz NOT NULL
);
INSERT INTO accounts SELECT i, {OPENING} FROM generate_series(1, {ACCOUNTS}) AS i;
"""
ACCOUNTS_SCHEMA = pa.schema(
    [pa.field("id", pa.int32(), nullable=False), ("balance", pa.decimal128(18, 2))]
)
TRANSFERS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("from_id", pa.int32()),
        ("to_id", pa.int32()),
        ("amount", pa.decimal128(18, 2)),
        ("at", pa.timestamp("us", tz="UTC")),
    ]
)


def _bank(url: str, stop: threading.Event) -> tuple[int, int]:
    """Transfers (and writes that move no money) until stopped, and how often the
    database cut the bank off: a transfer cut off is tried again unless it committed."""
    import psycopg

    rnd = random.Random(7)
    done = cut_off = 0
    conn: psycopg.Connection[Any] | None = None
    while not stop.is_set():
        # drawn before trying, so a transfer tried again is the same transfer
        a, b = rnd.sample(range(1, ACCOUNTS + 1), 2)
        amount = Decimal(rnd.randint(1, 5000)) / 100
        longer, idle = rnd.random() < 0.2, rnd.random() < 0.1
        try:
            conn = conn or psycopg.connect(url, autocommit=False)
            with conn.cursor() as cur:
                cur.execute("UPDATE accounts SET balance = balance - %s WHERE id = %s", (amount, a))
                if longer:  # more events between the two
                    cur.execute("UPDATE accounts SET balance = balance WHERE id = %s", (b,))
                cur.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", (amount, b))
                cur.execute(
                    "INSERT INTO transfers VALUES (%s, %s, %s, %s, now())", (done, a, b, amount)
                )
            conn.commit()
            if idle:  # a single-table write that moves no money
                with conn.cursor() as cur:
                    cur.execute("UPDATE accounts SET balance = balance WHERE id = %s", (a,))
                conn.commit()
        except psycopg.OperationalError:  # the server went away
            cut_off += 1
            conn = _reconnect(url)
            with conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM transfers WHERE id = %s", (done,))
                row = cur.fetchone()
            conn.commit()
            if not row or not row[0]:
                continue  # it did not commit: the same transfer again
        done += 1
        time.sleep(0.01)
    if conn is not None:
        conn.close()
    return done, cut_off


def _reconnect(url: str) -> Any:
    """A connection once the database is back (bounded)."""
    import psycopg

    deadline = time.monotonic() + 120
    while True:
        try:
            return psycopg.connect(url, autocommit=False)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def violations(accounts: pa.Table, transfers: pa.Table) -> list[str]:
    """What breaks the bank's invariants in one read of both tables (empty: none)."""
    balance = {int(i): Decimal(b) for i, b in zip(*accounts.to_pydict().values(), strict=True)}
    if len(balance) != ACCOUNTS:
        return [f"{len(balance)} accounts"]
    expected = {i: OPENING for i in balance}
    data = transfers.to_pydict()
    for src, dst, amount in zip(data["from_id"], data["to_id"], data["amount"], strict=True):
        expected[src] -= amount
        expected[dst] += amount
    wrong = [
        f"account {i}: {balance[i]} != {expected[i]}" for i in balance if balance[i] != expected[i]
    ]
    total = sum(balance.values())
    if total != OPENING * ACCOUNTS:
        wrong.append(f"total {total}")
    return wrong


@dataclass
class Reads:
    count: int = 0
    bad: list[list[str]] = field(default_factory=list)
    not_yet: int = 0  # strong reads refused while no barrier was common yet
    most: int = 0  # transfers seen by a read so far
    went_back: int = 0  # reads that saw fewer transfers than one before (a repeat applied)

    def check(self, accounts: pa.Table, transfers: pa.Table) -> None:
        self.count += 1
        if transfers.num_rows < self.most:
            self.went_back += 1
        self.most = max(self.most, transfers.num_rows)
        found = violations(accounts, transfers)
        if found:
            self.bad.append(found[:3])


def _read_loop(
    catalog: Catalog, names: dict[str, str], stop: threading.Event
) -> tuple[Reads, Reads]:
    """Until stopped (and ``READS`` strong reads done): strong reads of the shared-barrier
    tables, latest reads of the per-topic ones."""
    strong, latest = Reads(), Reads()
    shared = [names["accounts"], names["transfers"]]
    apart = [catalog.get_table(names[f"{t}_apart"]) for t in ("accounts", "transfers")]
    deadline = time.monotonic() + 600
    while (not stop.is_set() or strong.count < READS) and time.monotonic() < deadline:
        try:
            read = consistent_read_tables(catalog, shared, columns=None)
            strong.check(read[shared[0]], read[shared[1]])
        except NoConsistentVersion:
            strong.not_yet += 1
        if all(t.latest_snapshot() is not None for t in apart):
            latest.check(apart[0].read(), apart[1].read())
        time.sleep(0.01)
    return strong, latest


@dataclass
class _IngestProcess:
    """A ``dts ingest`` process, as a user runs it (it restarts its ingest when the
    cluster fails it over), that a test can SIGKILL and start again."""

    command: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # faulthandler: a process that will not stop is sent SIGABRT and prints every
        # thread's stack into its log, which the failure shows
        env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.command, stdout=out, stderr=subprocess.STDOUT, env=env
            )

    def wait_running(self, timeout_s: float = 180) -> None:
        """Until the ingest says it runs (its clients made, its first offsets read)."""
        assert self.proc is not None
        wait_for_output(self.proc, self.log, "Ctrl-C to stop", timeout_s)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=30)

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        try:
            return int(self.proc.wait(timeout=60))
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGABRT)  # its stacks into the log, then gone
            try:
                return int(self.proc.wait(timeout=30))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return int(self.proc.wait())


@contextmanager
def _ingests(
    bootstrap: str, warehouse: Path, prefix: str, tables: dict[str, Table], logs: Path
) -> Iterator[_IngestProcess]:
    """The database's one ingest (``--topic-prefix``) and the two per-topic ones, each a
    ``dts ingest`` process, all running; yields the database's."""
    common = [
        *(sys.executable, "-m", "bridge", "ingest", "--barrier-interval", "0.2"),
        *("--warehouse", str(warehouse), "--bootstrap", bootstrap),
    ]
    mapping = ",".join(f"public.{t}={tables[t].name}" for t in ("accounts", "transfers"))
    shared = _IngestProcess(
        [*common, "--topic-prefix", prefix, "--tables", mapping], logs / "ingest.log"
    )
    apart = [
        _IngestProcess(
            [
                *common,
                *("--from-topic", f"{prefix}.public.{t}", "--table", tables[f"{t}_apart"].name),
                *("--transaction-topic", f"{prefix}.transaction"),
            ],
            logs / f"ingest-{t}-apart.log",
        )
        for t in ("accounts", "transfers")
    ]
    for ingest in (shared, *apart):
        ingest.start()
    # the bank starts once every ingest runs, so the faults hit running ingests (started
    # together, the bank wrote its first third before a loaded machine had them running)
    for ingest in (shared, *apart):
        ingest.wait_running()
    try:
        yield shared
    finally:
        codes = [ingest.stop() for ingest in (shared, *apart)]
    for ingest, code in zip((shared, *apart), codes, strict=True):
        assert code == 0, ingest.log.read_text(errors="replace")[-6000:]


def _ingest_tails(logs: Path, lines: int = 15) -> str:
    """The last lines of every ingest's log (one of them may have stopped)."""
    return "\n".join(
        f"--- {log.name}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
        for log in sorted(logs.glob("ingest*.log"))
    )


def _source(url: str, table: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {table} ORDER BY id")
        return [tuple(row) for row in cur.fetchall()]


def _count(url: str, table: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {table}")
        row = cur.fetchone()
        return int(row[0]) if row else 0


def _records(bootstrap: str, topic: str) -> int:
    """Records in a topic (a redelivered event is one more)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "count", "log_level": 3})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(high - low)
    finally:
        c.close()


def _dts(table: Table) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in table.read().sort_by("id").to_pylist()]


@dataclass
class Running:
    """The parts a fault can hit while the bank writes."""

    pg: PostgresServer
    connect: ConnectWorker
    shared: _IngestProcess


@dataclass
class Fault:
    """``hit`` once the database holds ``at`` transfers."""

    at: int
    name: str
    hit: Callable[[Running], None]


@dataclass
class BankRun:
    written: int
    cut_off: int  # times the database cut the bank's connection
    sent: int  # insert events of transfers in the source topic (a redelivery counts again)
    strong: Reads
    latest: Reads

    def summary(self, faults: str) -> str:
        return (
            f"\nbank ({faults}): {self.written} transfers, {self.sent - self.written} insert "
            f"events sent again, the bank cut off {self.cut_off} time(s); strong reads across "
            f"the shared-barrier tables: {self.strong.count}, violations "
            f"{len(self.strong.bad)}, back in time {self.strong.went_back} (refused before a "
            f"common barrier: {self.strong.not_yet});"
            f" latest-snapshot reads of the per-topic tables: {self.latest.count}, violations "
            f"{len(self.latest.bad)}"
        )


def _run_bank(bootstrap: str, warehouse: Path, tmp_path: Path, faults: list[Fault]) -> BankRun:
    """The bank through ``faults``, until every table equals the database."""
    run = uuid.uuid4().hex[:6]
    prefix = f"bank{run}"
    catalog = Catalog(str(warehouse))
    names = {
        "accounts": f"bank.accounts_{run}",
        "transfers": f"bank.transfers_{run}",
        "accounts_apart": f"bank.accounts_apart_{run}",
        "transfers_apart": f"bank.transfers_apart_{run}",
    }
    tables = {
        key: catalog.create_table(
            name,
            ACCOUNTS_SCHEMA if key.startswith("accounts") else TRANSFERS_SCHEMA,
            primary_key=["id"],
            options={"bucket": "2"},
        )
        for key, name in names.items()
    }
    with postgres_server(logical=True) as pg:
        from tests.e2e.test_postgres_debezium import _execute

        url = pg.url
        _execute(url, DDL)
        connector = pg_connector(
            url,
            f"bank-{run}",
            ["public.accounts", "public.transfers"],
            prefix,
            # back soon after the database restarts (Debezium waits 10 s by default)
            {"retriable.restart.connector.wait.ms": "1000"},
        )
        # made here, as an operator would: the connector writes the transaction topic and
        # an empty table's topic only at their first event, and the ingest reads them all
        for topic in ("public.accounts", "public.transfers", "transaction"):
            create_topic(bootstrap, f"{prefix}.{topic}", 1, {})
        worker = start_worker(warehouse, bootstrap, list(names.values()), f"g-{run}", tmp_path)
        try:
            with (
                ConnectWorker(bootstrap, connector, work_dir=tmp_path / "connect") as connect,
                _ingests(bootstrap, warehouse, prefix, tables, tmp_path) as shared,
                ThreadPoolExecutor(2) as pool,
            ):
                reading, banking = threading.Event(), threading.Event()
                try:
                    reads = pool.submit(_read_loop, catalog, names, reading)
                    bank = pool.submit(_bank, url, banking)
                    parts = Running(pg, connect, shared)
                    for f in faults:
                        wait_for(lambda f=f: _count(url, "transfers") >= f.at, 300, f.name)
                        f.hit(parts)
                    # the bank writes on through every fault (each takes longer than the
                    # bank's 500 transfers), and a while after the last
                    enough = max(TRANSFERS, _count(url, "transfers") + TRANSFERS // 10)
                    wait_for(lambda: _count(url, "transfers") >= enough, 300, "the last ones")
                    banking.set()
                    written, cut_off = bank.result(timeout=600)
                    # and until every table has caught up with the database
                    for key, t in tables.items():
                        source = "accounts" if key.startswith("accounts") else "transfers"
                        try:
                            wait_for(
                                lambda t=t, s=source: _dts(t) == _source(url, s), 180, key, worker
                            )
                        except AssertionError as exc:  # the ingests' side of the story too
                            raise AssertionError(f"{exc}\n{_ingest_tails(tmp_path)}") from None
                finally:  # the pool waits for both threads on its way out
                    reading.set()
                    banking.set()
                strong, latest = reads.result(timeout=120)
        finally:
            code = worker.stop()
        assert code == 0, worker.tail()
    sent = _records(bootstrap, f"{prefix}.public.transfers")
    return BankRun(written, cut_off, sent, strong, latest)


def _restart_connect(parts: Running) -> None:
    """Connect SIGKILLed: it sends again what it wrote after its last flushed offset (up to
    1 s of transactions, some cut in half)."""
    parts.connect.kill()
    parts.connect.rest_port = 0
    parts.connect.start()


def _restart_ingest(parts: Running) -> None:
    """The database's dts ingest SIGKILLed in the middle of a barrier (of source
    transactions): its open Kafka transaction is aborted, the next one resumes at the
    offsets the last barrier committed."""
    parts.shared.kill()
    parts.shared.start()


def _restart_both(parts: Running) -> None:
    parts.shared.kill()
    parts.connect.kill()
    parts.connect.rest_port = 0
    parts.connect.start()
    parts.shared.start()


def test_every_strong_read_across_the_bank_is_one_committed_transaction(
    broker: EmbeddedBroker, warehouse: Path, tmp_path: Path
) -> None:
    faults = [
        Fault(TRANSFERS // 3, "Connect SIGKILLed", _restart_connect),
        # fast shutdown: Debezium's task fails, starts again and resumes from its last
        # flushed offset (the slot kept the WAL since)
        Fault(TRANSFERS // 2, "PostgreSQL restarted", lambda parts: parts.pg.restart()),
        Fault(2 * TRANSFERS // 3, "dts ingest SIGKILLed", _restart_ingest),
        # both at once: the new ingest knows what the old one completed only from its
        # completed-transactions topic, and Connect sends those transactions again
        Fault(5 * TRANSFERS // 6, "Connect and dts ingest SIGKILLed together", _restart_both),
    ]
    bank = _run_bank(broker.bootstrap, warehouse, tmp_path, faults)
    print(bank.summary(", ".join(f.name for f in faults)))
    assert bank.written >= TRANSFERS
    assert bank.cut_off >= 1  # the restart reached the bank's connection
    assert bank.strong.count >= READS, bank.strong
    assert bank.strong.bad == [], bank.strong.bad[:5]
    assert bank.strong.went_back == 0, bank.strong


def test_the_bank_through_a_three_broker_cluster_whose_leader_dies(
    warehouse: Path, tmp_path: Path
) -> None:
    """The same bank on three brokers (topics replicated three times, two in sync): the
    node leading the transfers' source topic is SIGKILLed while the database is written,
    and started again later. Connect, the ingests and the worker carry on through the
    failover."""
    killed: list[int] = []
    with KafkaCluster(3, data_dir=tmp_path / "kafka") as cluster:

        def kill_leader(parts: Running) -> None:
            topics = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
            source = next(t for t in topics.topics if t.endswith(".public.transfers"))
            killed.append(cluster.leader(source))
            cluster.kill(killed[-1])

        faults = [
            Fault(TRANSFERS // 3, "the source topic's leader killed", kill_leader),
            Fault(2 * TRANSFERS // 3, "it is back", lambda _: cluster.start_node(killed[-1])),
        ]
        bank = _run_bank(cluster.bootstrap, warehouse, tmp_path, faults)
    print(bank.summary(", ".join(f.name for f in faults)))
    assert killed and killed[0] in (1, 2, 3)
    assert bank.written >= TRANSFERS
    assert bank.strong.count >= READS, bank.strong
    assert bank.strong.bad == [], bank.strong.bad[:5]
