"""Fixtures of the Spark bridge tests: the shared session with `dts` registered, tiny tables."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def dts(spark: Any) -> Any:
    """The shared SparkSession with the `dts` data source registered."""
    from bridge.spark import register

    register(spark)
    return spark
