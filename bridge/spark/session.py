"""`local_session()`: a local Spark for the demo, the tests and the benchmarks.

Everything a local session needs to stay on this machine and out of the way:
driver bound to 127.0.0.1, no web UI, two shuffle partitions, Derby, the SQL
warehouse and Spark's scratch space under one work directory, Kafka credentials
redacted (`REDACTION_CONF`), Arrow's pool in the Python workers (`python_worker_conf`), and `dts`
registered, and the dts extension loaded when `make spark-ext` built it (reads by
name then use Spark's Parquet reader; see `extension.py`). Clusters build their own
sessions, with `extension_conf()` among their confs, and call `register(spark)`.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from bridge.arrow_pool import python_worker_conf
from bridge.spark.errors import ExtensionJarMissing, KafkaConnectorMissing
from bridge.spark.native.extension import extension_conf
from bridge.spark.registration import register
from logstore.localhost import cache_dir

_QUIET_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""

#: Session confs that keep Kafka credentials out of Spark's plans, ``explain()``, its UI and
#: event logs; clusters' own sessions should set them too. Spark redacts a data source option
#: whose key or value matches this regex or ``spark.sql.redaction.options.regex`` (default
#: ``(?i)url``), and a conf or environment variable whose key or value matches this one. Its
#: default ``(?i)secret|password|token|access[.]?key`` already catches a JAAS line holding
#: ``password=``; ``jaas`` is added so any ``kafka.sasl.jaas.config`` is hidden, whatever its
#: login module calls its secret (an OAuth client's, a keytab's).
REDACTION_CONF = {"spark.redaction.regex": "(?i)secret|password|token|access[.]?key|jaas"}


def spark_kafka_jars_dir() -> Path:
    """Where `make spark-kafka-jars` puts the connector for the installed PySpark."""
    import pyspark

    given = os.environ.get("DTS_SPARK_KAFKA_JARS")
    return Path(given) if given else cache_dir() / f"spark-kafka-{pyspark.__version__}"


def spark_kafka_jars() -> list[str]:
    """The connector's jars minus those PySpark ships (same artifact, any version).

    Raises KafkaConnectorMissing naming the make target when they were not fetched.
    """
    import pyspark

    where = spark_kafka_jars_dir()
    if not (where / ".complete").is_file():
        raise KafkaConnectorMissing(
            f"Spark's Kafka connector (spark-sql-kafka-0-10_2.13:{pyspark.__version__}) is not in "
            f"{where}: run `make spark-kafka-jars` (part of `make test`) to fetch it from Maven "
            "Central, or set DTS_SPARK_KAFKA_JARS to a directory that holds it"
        )
    shipped = {_artifact(j.name) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(str(j) for j in where.glob("*.jar") if _artifact(j.name) not in shipped)


def spark_kafka_available() -> bool:
    try:
        spark_kafka_jars()
    except KafkaConnectorMissing:
        return False
    return True


def _artifact(jar_name: str) -> str:
    # "kafka-clients-3.9.2.jar" -> "kafka-clients": the name up to the first -<digit>
    return re.sub(r"-\d.*$", "", jar_name.removesuffix(".jar"))


def local_session(
    app_name: str,
    work_dir: Path | None = None,
    *,
    cores: int = 2,
    conf: dict[str, str] | None = None,
    kafka: bool = False,
) -> Any:
    """A `local[cores]` SparkSession on 127.0.0.1 with `dts` registered, logging errors only.

    With `work_dir`, Spark's warehouse, scratch space, Derby and log configuration
    live under it (created if missing); `conf` adds or overrides settings. `kafka=True`
    loads Spark's own Kafka source (`format("kafka")`) from the jars `make
    spark-kafka-jars` cached (KafkaConnectorMissing when they are not there).
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
        # Streaming checkpoints (offset and commit logs, state stores) are written through
        # Hadoop's FileContext, which on local disk also wrote and renamed a .crc file per
        # file: the pipeline benchmark's derived micro-batches spent 212-222 ms p50 on their
        # two log files, 101-115 ms without (of ~1 s). Renames stay atomic.
        .config(
            "spark.hadoop.fs.AbstractFileSystem.file.impl", "org.apache.hadoop.fs.local.RawLocalFs"
        )
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
    jars = spark_kafka_jars() if kafka else []
    try:
        ext = extension_conf()
    except ExtensionJarMissing as missing:  # reads by name then go through the Python source
        print(f"note: {missing}", file=sys.stderr)
    else:
        jars.append(ext.pop("spark.jars"))
        for key, value in ext.items():
            builder = builder.config(key, value)
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    for key, value in {**REDACTION_CONF, **python_worker_conf(), **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
