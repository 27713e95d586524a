"""`local_session()`: a local Spark for the demo, the tests and the benchmarks.

Everything a local session needs to stay on this machine and out of the way:
driver bound to 127.0.0.1, no web UI, two shuffle partitions, Derby, the SQL
warehouse and Spark's scratch space under one work directory, and `dts`
registered. Clusters build their own sessions and call `register(spark)`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from bridge.spark.register import register

_QUIET_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def local_session(
    app_name: str,
    work_dir: Path | None = None,
    *,
    cores: int = 2,
    conf: dict[str, str] | None = None,
) -> Any:
    """A `local[cores]` SparkSession on 127.0.0.1 with `dts` registered, logging errors only.

    With `work_dir`, Spark's warehouse, scratch space, Derby and log configuration
    live under it (created if missing); `conf` adds or overrides settings.
    """
    # workers must run this interpreter (the one with the project installed)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
    )
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
        log4j = work_dir / "log4j2.properties"
        log4j.write_text(_QUIET_LOG4J)
        java_opts = f"-Dlog4j2.configurationFile=file:{log4j} -Dderby.system.home={work_dir}"
        builder = (
            builder.config("spark.sql.warehouse.dir", str(work_dir / "spark-warehouse"))
            .config("spark.local.dir", str(work_dir / "spark-local"))
            .config("spark.driver.extraJavaOptions", java_opts)
        )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
