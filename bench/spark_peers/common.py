"""What every system's side of the Spark peers benchmark shares: the Spark session (one
configuration for all), the phase timer, the command line and the JSON a side writes.

Only the standard library and PySpark are imported here (PySpark inside functions): this
module runs in dts's interpreter (PySpark 4.2) and in the Paimon one (PySpark 3.5).

A side is `python -m bench.spark_peers.<system> --data DIR --work DIR --out FILE ...`; it
runs the phases in order and writes ``{"system", "versions", "phases": {name: {"seconds",
"rows", "rows_returned", ...}}, "checks": {...}}``. `rows` is the rate's numerator, the
same for every system (see PHASES); `rows_returned` is what the system's query returned.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# One Spark configuration for every system (the connectors add only their own catalog,
# extensions and jars): two local cores, as many shuffle partitions as buckets.
CORES = 2
SHUFFLE_PARTITIONS = 4
DRIVER_MEMORY = "4g"
BUCKETS = 4

# phase -> what the rate counts (rows/s = rows / seconds; identical for every system)
PHASES: dict[str, str] = {
    "write": "rows of the initial write",
    "upsert": "rows of all upsert batches",
    "full_read": "rows in the table (count(*), sum(amount))",
    "filtered_read": "rows in the key range (count(*), sum(amount))",
    "changelog": "upsert rows between the two versions (count(*), sum(amount) of the changes)",
    "stream": "upsert rows committed after the start version (AvailableNow, noop sink)",
    "log_stream": "records of a log-tier table's topic, tier=log (AvailableNow, noop sink)",
    "log_stream_kafka": "the same topic through Spark's Kafka source + changelog_rows()",
}
# phases only dts runs (the peers have no log tier)
DTS_ONLY = ("log_stream", "log_stream_kafka")

QUIET_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def artifact(jar_name: str) -> str:
    """ "kafka-clients-3.9.2.jar" -> "kafka-clients": the name up to the first -<digit>."""
    return re.sub(r"-\d.*$", "", jar_name.removesuffix(".jar"))


def connector_jars(where: Path) -> list[str]:
    """The jars in `where` minus those the running PySpark ships (same artifact, any
    version): the connector and its own dependencies, never a second Spark or Scala."""
    import pyspark

    if not (where / ".complete").is_file():
        sys.exit(f"{where} is not complete: run `make bench-peers` (it fetches the jars)")
    shipped = {artifact(j.name) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(str(j) for j in where.glob("*.jar") if artifact(j.name) not in shipped)


CHECKPOINT_FS = "org.apache.hadoop.fs.local.RawLocalFs"


def session(app: str, work: Path, conf: dict[str, str] | None = None) -> Any:
    """A local[2] SparkSession on 127.0.0.1, quiet, scratch space under `work`."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    work.mkdir(parents=True, exist_ok=True)
    log4j = work / "log4j2.properties"
    log4j.write_text(QUIET_LOG4J)
    builder = (
        SparkSession.builder.master(f"local[{CORES}]")
        .appName(app)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", DRIVER_MEMORY)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        # as dts's local_session does: every system's streams write their checkpoints
        # alike (without Hadoop's .crc files)
        .config("spark.hadoop.fs.AbstractFileSystem.file.impl", CHECKPOINT_FS)
        .config("spark.sql.warehouse.dir", str(work / "spark-warehouse"))
        .config("spark.local.dir", str(work / "spark-local"))
        .config(
            "spark.driver.extraJavaOptions",
            f"-Dlog4j2.configurationFile=file:{log4j} -Dderby.system.home={work}",
        )
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def args(description: str | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--data", type=Path, required=True, help="the generated Parquet input")
    ap.add_argument("--work", type=Path, required=True, help="this system's scratch directory")
    ap.add_argument("--out", type=Path, required=True, help="JSON results")
    ap.add_argument("--jars", type=Path, help="the connector's jar directory")
    ap.add_argument("--repeat", type=int, default=2, help="read phases: keep the fastest of N")
    ap.add_argument("--profile", type=Path, help="cProfile the driver's phases into this dir")
    return ap.parse_args()


class Spec:
    """The generated input as the driver described it in spec.json."""

    def __init__(self, data: Path) -> None:
        spec = json.loads((data / "spec.json").read_text())
        self.data = data
        self.rows: int = spec["rows"]
        self.batches: int = spec["batches"]
        self.batch_rows: int = spec["batch_rows"]
        lo, hi = spec["range"]
        self.range: tuple[int, int] = (int(lo), int(hi))
        self.expected: dict[str, Any] = spec["expected"]

    @property
    def base(self) -> str:
        return str(self.data / "base")

    def upsert(self, i: int) -> str:
        return str(self.data / f"upsert-{i}")

    @property
    def upsert_rows(self) -> int:
        return self.batches * self.batch_rows


class Run:
    """Times the phases of one system and writes its JSON."""

    def __init__(self, system: str, ns: argparse.Namespace, spec: Spec) -> None:
        self.system = system
        self.ns = ns
        self.spec = spec
        self.phases: dict[str, dict[str, Any]] = {}
        self.checks: dict[str, Any] = {}
        self.versions: dict[str, str] = {}
        self.notes: dict[str, str] = {}
        self.streams = 0  # streaming runs so far (each gets its own checkpoint)
        self.started = time.monotonic()

    def log(self, msg: str) -> None:
        print(f"[{self.system} {time.monotonic() - self.started:7.1f}s] {msg}", flush=True)

    @contextmanager
    def _profiled(self, name: str) -> Iterator[None]:
        if self.ns.profile is None:
            yield
            return
        import cProfile

        self.ns.profile.mkdir(parents=True, exist_ok=True)
        prof = cProfile.Profile()
        prof.enable()
        try:
            yield
        finally:
            prof.disable()
            prof.dump_stats(str(self.ns.profile / f"{self.system}-{name}.prof"))

    def once(self, name: str, rows: int, fn: Callable[[], Any]) -> Any:
        """Run a write phase once; rate numerator `rows`."""
        self.log(f"{name}: {rows:,} rows ...")
        t0 = time.perf_counter()
        with self._profiled(name):
            out = fn()
        dt = time.perf_counter() - t0
        self.phases[name] = {"seconds": dt, "rows": rows}
        self.log(f"{name}: {dt:.2f} s, {rows / dt:,.0f} rows/s")
        return out

    def best(self, name: str, rows: int, fn: Callable[[], Sequence[Any]]) -> Sequence[Any]:
        """Run a read phase `--repeat` times, keep the fastest; fn returns the result row
        (count first), kept for the checks."""
        times, result = [], None
        for i in range(max(1, self.ns.repeat)):
            t0 = time.perf_counter()
            with self._profiled(f"{name}-{i}"):
                result = fn()
            times.append(time.perf_counter() - t0)
        assert result is not None
        dt = min(times)
        self.phases[name] = {
            "seconds": dt,
            "all_seconds": times,
            "rows": rows,
            "rows_returned": int(result[0]) if result[0] is not None else 0,
            "result": [float(x) if x is not None else None for x in result],
        }
        self.log(
            f"{name}: {dt:.2f} s (runs {', '.join(f'{t:.2f}' for t in times)}), "
            f"{rows / dt:,.0f} rows/s, result {list(result)}"
        )
        return result

    def changelog(self, changes: Callable[[], Any], kind_column: str) -> None:
        """The changelog phase, and how many rows of each kind `changes()` returned."""
        self.best("changelog", self.spec.upsert_rows, lambda: agg(changes()))
        kinds = changes().groupBy(kind_column).count().collect()
        self.checks["changelog_row_kinds"] = {r[0]: int(r[1]) for r in kinds}

    def stream(self, reader: Callable[[], Any]) -> None:
        """The stream phase: `reader()` run to its end, with a fresh checkpoint each run."""
        self.stream_phase("stream", self.spec.upsert_rows, reader)

    def stream_phase(self, name: str, rows: int, reader: Callable[[], Any]) -> None:
        """A streaming phase: `reader()` run to its end, a fresh checkpoint each run."""

        def once() -> tuple[int]:
            self.streams += 1
            return (stream_noop(reader(), self.ns.work / f"checkpoint-{self.streams}"),)

        self.best(name, rows, once)

    def write(self) -> None:
        import pyspark

        self.versions.setdefault("pyspark", pyspark.__version__)
        self.versions.setdefault("python", sys.version.split()[0])
        self.ns.out.parent.mkdir(parents=True, exist_ok=True)
        self.ns.out.write_text(
            json.dumps(
                {
                    "system": self.system,
                    "versions": self.versions,
                    "phases": self.phases,
                    "checks": self.checks,
                    "notes": self.notes,
                },
                indent=2,
            )
        )
        self.log(f"wrote {self.ns.out}")


def agg(df: Any) -> Sequence[Any]:
    """count(*) and sum(amount): every read phase computes these two."""
    row = df.selectExpr("count(*)", "sum(amount)").collect()[0]
    return (row[0], row[1])


def stream_noop(reader: Any, checkpoint: Path) -> int:
    """Run `reader` to the end with Trigger.AvailableNow into the noop sink; rows read."""
    q = (
        reader.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    return sum(_input_rows(p) for p in q.recentProgress)


def _input_rows(progress: Any) -> int:
    # PySpark 3.5 gives dicts, 4.x StreamingQueryProgress objects
    if isinstance(progress, dict):
        return int(progress.get("numInputRows", 0))
    return int(progress.numInputRows)
