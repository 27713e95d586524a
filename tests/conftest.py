"""Shared fixtures: real parts started on 127.0.0.1 with bounded time, stopped after."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from logstore.broker import EmbeddedBroker
from logstore.localhost import PORTS_ENV, port_span


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist's workers run with COLUMNS=80 and LINES=24 set; the commands the tests
    # start would wrap their output at 80 columns, where a pipe or a log file gets full lines
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.pop("COLUMNS", None)
        os.environ.pop("LINES", None)
        _split_ports(os.environ["PYTEST_XDIST_WORKER"])
    # The tests' JVMs (Spark sessions and clusters, Kafka Connect) live seconds to minutes:
    # C2's compiler threads spent about a third of a short Spark session's CPU on code that
    # never ran long enough to repay it (README's Spark block: 67-70 s of CPU, 42-54 s with
    # C1 only), and on two cores that CPU is the suite's minutes. Tests check behaviour, not
    # speed; the benchmarks run the JVM's defaults. (The embedded broker runs C1 only anyway.)
    os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")


def _split_ports(worker: str) -> None:
    """Each pytest-xdist worker (and what it starts) picks server ports from its own part
    of the span: two workers never pick the same port between the choice and the bind."""
    span = port_span()
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if span is None or not worker.startswith("gw") or count < 2:
        return
    low, high = span
    size = (high - low + 1) // count
    start = low + int(worker[2:]) * size
    os.environ.setdefault(PORTS_ENV, f"{start}-{start + size - 1}")


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    """A fresh local warehouse directory."""
    path = tmp_path / "warehouse"
    path.mkdir()
    return path


@pytest.fixture
def snapshot_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The snapshot files read from now on (paths, in order): what a walk of a table's
    history costs, which a table keeping an hour of snapshots makes matter."""
    from filestore.io.fileio import FileIO

    read: list[str] = []
    try_read = FileIO.try_read_bytes

    def counted(io: FileIO, path: str) -> bytes | None:
        if "/snapshot/snapshot-" in path:
            read.append(path)
        return try_read(io, path)

    monkeypatch.setattr(FileIO, "try_read_bytes", counted)
    return read


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that uses the broker runs against Apache Kafka: `pytest -m apache_kafka`.

    Files holding a slow test come first (in their order; each file stays whole): the
    Makefile's pytest-xdist hands out a file at a time in this order, so the long files
    start at once and the many short ones fill the end. In xdist's own order (most tests
    first) a one-test file of four minutes ran alone at the end of the suite."""
    for item in items:
        if "broker" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.apache_kafka)
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """One Apache Kafka broker (KRaft) for the whole session (tests use unique topic names)."""
    log_path = tmp_path_factory.mktemp("broker") / "broker.log"
    with EmbeddedBroker(log_path=log_path) as b:
        yield b


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A local SparkSession (2 cores, loopback only, `dts` registered), shared by the session."""
    from bridge.spark.session import local_session, spark_kafka_available

    # Spark's own Kafka source when `make spark-kafka-jars` cached it; the tests of it say
    # so when it is missing instead of failing every Spark test
    session = local_session(
        "dts-tests", tmp_path_factory.mktemp("spark"), kafka=spark_kafka_available()
    )
    try:
        yield session
    finally:
        session.stop()
