"""Shared fixtures: real parts started on 127.0.0.1 with bounded time, stopped after."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from logstore.broker import EmbeddedBroker


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    """A fresh local warehouse directory."""
    path = tmp_path / "warehouse"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """One embedded Tansu broker for the whole session (tests use unique topic names)."""
    log_path = tmp_path_factory.mktemp("broker") / "broker.log"
    with EmbeddedBroker(log_path=log_path) as b:
        yield b


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A local SparkSession (2 cores, loopback only), shared by the session."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    tmp = tmp_path_factory.mktemp("spark")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("dts-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(tmp / "spark-warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={tmp}")
        .getOrCreate()
    )
    try:
        yield session
    finally:
        session.stop()
