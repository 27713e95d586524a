"""dts's data source and sink run in Spark's Python workers: a local session gives them
Arrow's jemalloc pool (``bridge.arrow_pool.python_worker_conf``), which the JVM's own
environment (the test process's) does not name."""

from __future__ import annotations

from typing import Any


def test_a_python_data_sources_worker_allocates_from_jemalloc(spark: Any) -> None:
    from pyspark.sql.datasource import DataSource, DataSourceReader

    # defined here, so that they travel to the worker by value, as a user's source does
    class PoolReader(DataSourceReader):
        def read(self, partition: Any) -> Any:
            import pyarrow as pa

            yield (pa.default_memory_pool().backend_name,)

    class PoolSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "arrow_pool_probe"

        def schema(self) -> str:
            return "pool string"

        def reader(self, schema: Any) -> PoolReader:
            return PoolReader()

    spark.dataSource.register(PoolSource)
    rows = spark.read.format("arrow_pool_probe").load().collect()
    assert [r.pool for r in rows] == ["jemalloc"]
