"""Fixtures of the Spark bridge tests: the shared session with `dts` registered, a MetaService."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bridge.support import meta_service


@pytest.fixture
def dts(spark: Any) -> Any:
    """The shared SparkSession (it has the `dts` data source registered)."""
    return spark


@pytest.fixture
def conf_spark(spark: Any) -> Iterator[Any]:
    """The shared session for a test that sets `spark.dts.*` confs or registers tables by
    name: afterwards the confs are unset, the databases it added dropped, `dts` re-registered."""
    from bridge.spark.native.extension import TABLE_WAREHOUSE_CONF
    from bridge.spark.options.keys import SESSION_CONF_PREFIX, SESSION_DEFAULTS
    from bridge.spark.registration import BY_NAME_CONF, EXPOSED_CONF, register

    before = {db.name for db in spark.catalog.listDatabases()}
    yield spark
    for key in (*SESSION_DEFAULTS, BY_NAME_CONF.removeprefix(SESSION_CONF_PREFIX)):
        spark.conf.unset(SESSION_CONF_PREFIX + key)
    spark.conf.unset(EXPOSED_CONF)
    for key in spark.conf.getAll:
        if key.startswith(TABLE_WAREHOUSE_CONF):
            spark.conf.unset(key)
    for db in spark.catalog.listDatabases():
        if db.name not in before:
            spark.sql(f"DROP DATABASE IF EXISTS `{db.name}` CASCADE")
    register(spark)


@pytest.fixture
def meta_url(tmp_path: Path) -> Iterator[str]:
    """A real MetaService (uvicorn in a thread, 127.0.0.1, free port) on its own store."""
    with meta_service(tmp_path / "meta", heartbeat_timeout_ms=30_000) as url:
        yield url
