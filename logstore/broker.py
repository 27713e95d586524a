"""Embedded Apache Kafka broker: a single-node KRaft broker from jars in the local cache.

Used by ``dts broker``, the demo and the test suite. ``make kafka-jars`` (part of
``make test``/``make demo``) copies Apache Kafka ``KAFKA_VERSION`` and its runtime
dependencies from Maven Central into ``kafka_jars_dir()``; this module formats a
fresh log directory with a random cluster id (``kafka.tools.StorageTool``), then
runs ``kafka.Kafka`` with the broker and controller roles on two loopback ports.
Transactions work with replication factor 1. The log directory is temporary and
removed on stop: this is for development, tests and demos; production points
``bootstrap`` at a real cluster.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from confluent_kafka.admin import AdminClient

from logstore.broker_security import BrokerSecurity, write_client_properties
from logstore.errors import BrokerStartError
from logstore.localhost import (
    LOOPBACK,
    cache_dir,
    free_port,
    kill_process,
    stop_process,
    write_private,
)
from logstore.tls_files import TlsFiles, ensure_tls_files

#: the Apache Kafka release the project runs (the Makefile and docker-compose.yml read it here)
KAFKA_VERSION = "4.1.1"
#: the make target that fills the jar cache
JARS_TARGET = "make kafka-jars"

# Serial GC and the C1 compiler only: a dev broker on a small shared machine starts ~30%
# faster and needs no more; the heap stays small so tests leave room for Spark.
JVM_OPTIONS = (
    "-Xms128m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xshare:auto",
    "-Djava.awt.headless=true",
)

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = info
"""


def kafka_jars_dir() -> Path:
    """The broker's jars: ``$DTS_KAFKA_JARS`` or ``<cache>/kafka-<KAFKA_VERSION>``."""
    given = os.environ.get("DTS_KAFKA_JARS")
    return Path(given) if given else cache_dir() / f"kafka-{KAFKA_VERSION}"


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` or ``java`` on PATH; BrokerStartError when there is none."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise BrokerStartError(
            "Java is not installed (no JAVA_HOME, no java on PATH): the embedded Apache Kafka "
            "broker needs a Java 17+ runtime, e.g. apt-get install openjdk-17-jre-headless"
        )
    return found


def broker_classpath() -> str:
    """The classpath of the cached Kafka jars; BrokerStartError when they were not fetched."""
    jars_dir = kafka_jars_dir()
    core = jars_dir / f"kafka_2.13-{KAFKA_VERSION}.jar"
    if not core.is_file() or not (jars_dir / ".complete").is_file():
        raise BrokerStartError(
            f"the Apache Kafka {KAFKA_VERSION} jars are not in {jars_dir}: run `{JARS_TARGET}` "
            "(part of `make test` and `make demo`) to fetch them from Maven Central once, or set "
            "DTS_KAFKA_JARS to a directory that holds them"
        )
    return str(jars_dir / "*")


def random_cluster_id(draw: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding.

    Never one starting with ``-`` (as Kafka's own ``Uuid.randomUuid``): the storage
    tool's argument parser reads ``-t -xyz`` as an unknown option and fails the start
    (1 start in 64 did).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(draw()).decode("ascii").rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _jaas_value(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def server_properties(
    port: int,
    controller_port: int,
    log_dir: Path,
    sasl_users: dict[str, str] | None = None,
    *,
    node_id: int = 1,
    voters: str | None = None,
    replicas: int = 1,
    extra: dict[str, str] | None = None,
) -> str:
    """A combined broker+controller node with transactions.

    Alone (the default) it is a one-node cluster with replication factor 1. In a cluster
    of ``replicas`` nodes (``voters``: every node's ``id@host:controller_port``) topics,
    consumer offsets and transaction state get ``replicas`` replicas and
    ``min.insync.replicas`` = a majority, so one node may fail without losing an
    acknowledged write or stopping writes.

    ``sasl_users`` (name -> password) makes the client listener SASL_PLAINTEXT with the
    PLAIN mechanism, so clients must authenticate (the first user is the broker's own).

    ``extra`` settings are added last, over the defaults (a soak's short retention checks).
    """
    proto = "SASL_PLAINTEXT" if sasl_users else "PLAINTEXT"
    majority = str(replicas // 2 + 1)
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters or f"{node_id}@{LOOPBACK}:{controller_port}",
        "listeners": f"{proto}://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller_port}",
        "advertised.listeners": f"{proto}://{LOOPBACK}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": proto,
        "listener.security.protocol.map": f"{proto}:{proto},CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "default.replication.factor": str(replicas),
        "min.insync.replicas": majority,
        "offsets.topic.replication.factor": str(replicas),
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": majority,
        "transaction.state.log.num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0",
        # tests and the demo fail workers over within seconds (--session-timeout 3)
        "group.min.session.timeout.ms": "1000",
        # a producer SIGKILLed mid-transaction is aborted by the coordinator this soon
        # after its transaction.timeout.ms, instead of the default 10 s
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        "auto.create.topics.enable": "true",
    }
    if sasl_users:
        (admin, admin_pw), *_ = sasl_users.items()
        users = " ".join(f'user_{u}="{_jaas_value(p)}"' for u, p in sasl_users.items())
        props.update(
            {
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f'username="{_jaas_value(admin)}" password="{_jaas_value(admin_pw)}" {users};'
                ),
            }
        )
    props.update(extra or {})
    # .properties files treat a backslash as an escape: keep JAAS escapes intact
    return "".join(f"{k}={v.replace(chr(92), chr(92) * 2)}\n" for k, v in props.items())


@dataclass
class EmbeddedBroker:
    """A single-node Apache Kafka (KRaft) process on 127.0.0.1; use as a context manager.

    ``port=0`` picks a free port. ``log_path`` receives the broker's output (a
    temporary file when not given) so failures can be diagnosed. ``data_dir`` holds
    the broker's log directory; a temporary one (removed on stop) when not given.
    """

    port: int = 0
    log_path: Path | None = None
    data_dir: Path | None = None
    startup_timeout_s: float = 60.0
    controller_port: int = 0
    #: name -> password: clients must authenticate with SASL/PLAIN (tests of secured clusters)
    sasl_users: dict[str, str] | None = None
    #: SASL_SSL with SCRAM-SHA-512, TLS and ACLs enforced (``logstore.broker_security``)
    security: BrokerSecurity | None = None
    #: a node of a ``KafkaCluster``: its id, every node's controller, the shared cluster
    #: id and the cluster's size (replicas of every topic)
    node_id: int = 1
    voters: str | None = None
    cluster_id: str | None = None
    replicas: int = 1
    #: broker settings over the defaults (``server_properties``'s ``extra``)
    properties: dict[str, str] = field(default_factory=dict)
    #: the JVM's options (heap, collector): a small dev broker's by default
    jvm_options: tuple[str, ...] = JVM_OPTIONS
    startup_seconds: float | None = field(default=None, init=False)
    #: the secured broker's CA and keystore (set by ``launch``)
    tls: TlsFiles | None = field(default=None, init=False)
    #: the admin's client properties file of a secured broker (set by ``launch``)
    client_properties: Path | None = field(default=None, init=False)
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def start(self) -> EmbeddedBroker:
        if self._proc is not None:
            return self
        began = time.monotonic()
        self.launch()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def launch(self) -> None:
        """Start the process without waiting for it to serve (a cluster's nodes answer
        only once a majority of them runs)."""
        if self._proc is not None:
            return
        java = java_binary()
        classpath = broker_classpath()
        if self.port == 0:
            self.port = free_port()
        if self.controller_port == 0:
            self.controller_port = free_port()
            while self.controller_port == self.port:
                self.controller_port = free_port()
        if self.data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="dts-kafka-")
            work = Path(self._tmp.name)
        else:
            work = self.data_dir
            work.mkdir(parents=True, exist_ok=True)
        if self.log_path is None:
            # outside the temporary data directory: the log must outlive a failed start
            fd, name = tempfile.mkstemp(prefix="dts-broker-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        log_dir = work / "kraft-logs"
        props = work / "server.properties"
        extra = dict(self.properties)
        if self.security is not None:
            if self.sasl_users:
                raise BrokerStartError("sasl_users (SASL/PLAIN) and security are exclusive")
            self.tls = ensure_tls_files(self.security.tls_dir or work / "tls")
            extra = {
                **self.security.server_properties(self.port, self.controller_port, self.tls),
                **extra,
            }
            self.client_properties = write_client_properties(
                work / "client.properties", self.client_settings()
            )
        write_private(
            props,
            server_properties(
                self.port,
                self.controller_port,
                log_dir,
                self.sasl_users,
                node_id=self.node_id,
                voters=self.voters,
                replicas=self.replicas,
                extra=extra,
            ),
        )
        log4j = work / "log4j2.properties"
        log4j.write_text(_LOG4J2)
        log4j_file = f"-Dlog4j2.configurationFile=file:{log4j}"
        base = [java, *self.jvm_options, log4j_file, "-cp", classpath]
        try:
            if not (log_dir / "meta.properties").is_file():
                self._format(base, props)
            with open(self.log_path, "ab") as log:
                self._proc = subprocess.Popen(
                    [*base, "kafka.Kafka", str(props)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
        except BaseException:
            self.stop()
            raise

    def _format(self, base: list[str], props: Path) -> None:
        cluster_id = self.cluster_id or random_cluster_id()
        cmd = [*base, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)]
        if self.security is not None:
            cmd += self.security.format_args()
        done = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=self.startup_timeout_s,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            output = (done.stderr or done.stdout).strip()[-2000:]
            if self.security is not None:
                output = self.security.redact(output)
            raise BrokerStartError(
                f"formatting the Kafka log directory failed (exit {done.returncode}): {output}"
            )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        last_error = "no answer"
        admin = AdminClient(
            {"bootstrap.servers": self.bootstrap, "log_level": 0, **self.client_settings()}
        )
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise BrokerStartError(
                    f"the Kafka broker exited with code {self._proc.returncode}; "
                    f"see its log at {self.log_path}"
                )
            try:
                # a metadata answer naming a broker means the broker registered with its
                # controller and serves requests
                if admin.list_topics(timeout=1.0).brokers:
                    return
                last_error = "no broker registered yet"
            except Exception as exc:  # the client raises KafkaException until it answers
                last_error = str(exc)
            time.sleep(0.05)
        raise BrokerStartError(
            f"the Kafka broker on {self.bootstrap} did not answer within "
            f"{self.startup_timeout_s:.0f}s ({last_error}); see {self.log_path}"
        )

    def wait_ready(self) -> None:
        """Wait until the node serves requests (after ``launch``)."""
        began = time.monotonic()
        self._wait_ready()
        self.startup_seconds = time.monotonic() - began

    def kill(self) -> None:
        """SIGKILL the process (a crash: nothing flushed, no controlled shutdown); the data
        directory stays, so ``start`` brings the same node back."""
        proc, self._proc = self._proc, None
        kill_process(proc)

    def stop(self, timeout_s: float = 20.0) -> None:
        proc, self._proc = self._proc, None
        try:
            stop_process(proc, timeout_s)
        finally:
            tmp, self._tmp = self._tmp, None
            if tmp is not None:
                tmp.cleanup()

    def client_settings(self, user: str | None = None) -> dict[str, str]:
        """Client settings (librdkafka names) of this broker's first SASL user, if any; of
        a secured broker, ``user``'s (default: the admin)."""
        if self.security is not None:
            if self.tls is None:
                raise BrokerStartError("the secured broker's certificates exist once it launched")
            return self.security.client_settings(self.tls, user)
        if not self.sasl_users:
            return {}
        user, password = next(iter(self.sasl_users.items()))
        return {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": password,
        }

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.contextmanager
def embedded_broker(port: int = 0) -> Iterator[EmbeddedBroker]:
    """Start an embedded broker for the duration of a ``with`` block."""
    with EmbeddedBroker(port=port) as broker:
        yield broker
