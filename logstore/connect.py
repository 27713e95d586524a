"""A local Kafka Connect worker running Debezium's PostgreSQL connector, from jars in the
local cache, for trying dts on a real database and for the tests.

``make connect-jars`` copies Apache Kafka's Connect runtime (``KAFKA_VERSION``, the
broker's) and Debezium's PostgreSQL connector (``DEBEZIUM_VERSION``) with their runtime
dependencies from Maven Central into ``connect_jars_dir()``. ``ConnectWorker`` runs
``ConnectStandalone`` with one connector, its offsets in a file of its work directory (a
restarted worker resumes there and redelivers what it had not flushed: at least once),
its REST API on a loopback port, and waits (bounded) until the connector's task runs.
Production users run their own Connect cluster and point ``dts ingest`` at its topics.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from logstore.broker import JVM_OPTIONS, KAFKA_VERSION, java_binary
from logstore.errors import ConnectStartError
from logstore.localhost import LOOPBACK, cache_dir, free_port, kill_process, stop_process

#: Debezium's release (all of its artifacts at one version)
DEBEZIUM_VERSION = "3.6.1.Final"
JARS_TARGET = "make connect-jars"

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
"""


def connect_jars_dir() -> Path:
    given = os.environ.get("DTS_CONNECT_JARS")
    if given:
        return Path(given)
    return cache_dir() / f"kafka-connect-{KAFKA_VERSION}-debezium-{DEBEZIUM_VERSION}"


def connect_classpath() -> str:
    jars = connect_jars_dir()
    if not (jars / ".complete").is_file():
        raise ConnectStartError(
            f"the Kafka Connect {KAFKA_VERSION} and Debezium {DEBEZIUM_VERSION} jars are not in "
            f"{jars}: run `{JARS_TARGET}` (part of `make test`) to fetch them from Maven "
            "Central once, or set DTS_CONNECT_JARS to a directory that holds them"
        )
    return str(jars / "*")


def postgres_connector(
    name: str,
    *,
    host: str,
    port: int,
    user: str,
    dbname: str,
    tables: list[str],
    topic_prefix: str,
    password: str = "",
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Debezium's PostgreSQL connector set as dts reads it best: ``pgoutput`` (no server
    plug-in to install), transaction metadata on (``<prefix>.transaction``, which
    ``dts ingest --transaction-topic`` reads so a barrier never splits a transaction),
    decimals as exact strings, timestamps in microseconds, truncates sent, heartbeats
    every 10 s to a topic apart."""
    return {
        "name": name,
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "database.hostname": host,
        "database.port": str(port),
        "database.user": user,
        "database.password": password,
        "database.dbname": dbname,
        "topic.prefix": topic_prefix,
        "plugin.name": "pgoutput",
        "slot.name": f"dts_{name}".replace("-", "_"),
        "publication.name": f"dts_{name}".replace("-", "_"),
        "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(tables),
        "provide.transaction.metadata": "true",
        "decimal.handling.mode": "string",
        "time.precision.mode": "adaptive_time_microseconds",
        "snapshot.mode": "initial",
        # TRUNCATE empties the dts table too (the connector skips truncates by default)
        "skipped.operations": "none",
        # the slot's position advances while the tables are quiet and the database is not
        # (else PostgreSQL keeps its WAL); heartbeats go to their own topic, not dts's
        "heartbeat.interval.ms": "10000",
        **(extra or {}),
    }


@dataclass
class ConnectWorker:
    """``ConnectStandalone`` with one connector; ``work_dir`` keeps its offsets, so a new
    worker on the same directory resumes where the last one flushed."""

    bootstrap: str
    connector: dict[str, str]
    work_dir: Path | None = None
    rest_port: int = 0
    startup_timeout_s: float = 90.0
    log_path: Path | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False, repr=False)

    @property
    def rest_url(self) -> str:
        return f"http://{LOOPBACK}:{self.rest_port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> ConnectWorker:
        if self._proc is not None:
            return self
        java, classpath = java_binary(), connect_classpath()
        if self.work_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="dts-connect-")
            self.work_dir = Path(self._tmp.name)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if self.rest_port == 0:
            self.rest_port = free_port()
        if self.log_path is None:
            self.log_path = self.work_dir / "connect.log"
        worker = self.work_dir / "worker.properties"
        worker.write_text(self._worker_properties())
        connector = self.work_dir / "connector.json"
        connector.write_text(json.dumps(self.connector))
        log4j = self.work_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2)
        cmd = [
            java,
            *JVM_OPTIONS,
            f"-Dlog4j2.configurationFile=file:{log4j}",
            "-cp",
            classpath,
            "org.apache.kafka.connect.cli.ConnectStandalone",
            str(worker),
            str(connector),
        ]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            self._wait_running()
        except BaseException:
            self.stop()
            raise
        return self

    def _worker_properties(self) -> str:
        assert self.work_dir is not None
        props = {
            "bootstrap.servers": self.bootstrap,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "false",
            "value.converter.schemas.enable": "true",
            "offset.storage.file.filename": str(self.work_dir / "offsets"),
            "offset.flush.interval.ms": "1000",
            "listeners": f"http://{LOOPBACK}:{self.rest_port}",
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def status(self) -> dict[str, Any]:
        """The connector's status from the worker's REST API."""
        name = self.connector["name"]
        with urllib.request.urlopen(f"{self.rest_url}/connectors/{name}/status", timeout=5) as r:
            data: dict[str, Any] = json.loads(r.read())
        return data

    def _wait_running(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise ConnectStartError(
                    f"the Kafka Connect worker exited with code {self._proc.returncode}; "
                    f"see its log at {self.log_path}"
                )
            try:
                tasks = self.status().get("tasks", [])
                states = [t.get("state") for t in tasks]
                if states and all(s == "RUNNING" for s in states):
                    return
                if "FAILED" in states:
                    trace = next(t.get("trace", "") for t in tasks if t.get("state") == "FAILED")
                    raise ConnectStartError(f"the connector's task failed: {trace[:2000]}")
                last = f"tasks {states or 'not yet created'}"
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise ConnectStartError(
            f"the Kafka Connect worker on {self.rest_url} did not run its connector within "
            f"{self.startup_timeout_s:.0f}s ({last}); see {self.log_path}"
        )

    def kill(self) -> None:
        """SIGKILL (a crash: offsets since the last flush are not saved)."""
        proc, self._proc = self._proc, None
        kill_process(proc)

    def stop(self, timeout_s: float = 30.0) -> None:
        proc, self._proc = self._proc, None
        try:
            stop_process(proc, timeout_s)
        finally:
            tmp, self._tmp = self._tmp, None
            if tmp is not None:
                tmp.cleanup()

    def __enter__(self) -> ConnectWorker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
