"""A Kafka cluster of several KRaft nodes on 127.0.0.1: ``dts broker --nodes 3``, fault tests.

Every node is a combined broker+controller (``EmbeddedBroker``) with its own ports and
log directory and the cluster's shared id; topics get one replica per node and
``min.insync.replicas`` = a majority, so the cluster keeps accepting acknowledged writes,
transactions included, while one node is down. ``kill`` crashes a node (SIGKILL) and
``start_node`` brings it back with its data, as a machine that rebooted.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType

from confluent_kafka.admin import AdminClient

from logstore.broker import EmbeddedBroker, random_cluster_id
from logstore.broker_security import BrokerSecurity
from logstore.errors import BrokerStartError
from logstore.localhost import LOOPBACK, free_port


def _free_ports(n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


@dataclass
class KafkaCluster:
    """``nodes`` Apache Kafka (KRaft) nodes on 127.0.0.1; use as a context manager.

    ``data_dir`` holds one directory per node (``node-<id>``: log directory, configuration,
    log file); a temporary one, removed on stop, when not given.
    """

    nodes: int = 3
    data_dir: Path | None = None
    startup_timeout_s: float = 120.0
    #: SASL_SSL/SCRAM, TLS and ACLs on every node (one CA: the certificates are shared)
    security: BrokerSecurity | None = None
    #: the directory holding the nodes' (``data_dir`` or a temporary one), once started
    root: Path | None = field(default=None, init=False)
    brokers: dict[int, EmbeddedBroker] = field(default_factory=dict, init=False)
    startup_seconds: float | None = field(default=None, init=False)
    _tmp: Path | None = field(default=None, init=False, repr=False)

    @property
    def bootstrap(self) -> str:
        """Every node's client address: clients find the live ones."""
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self) -> KafkaCluster:
        if self.brokers:
            return self
        if self.nodes < 1:
            raise BrokerStartError(f"a cluster needs at least one node, not {self.nodes}")
        began = time.monotonic()
        root = self.data_dir
        if root is None:
            root = self._tmp = Path(tempfile.mkdtemp(prefix="dts-kafka-cluster-"))
        self.root = root
        security = self.security
        if security is not None and security.tls_dir is None:
            security = replace(security, tls_dir=root / "tls")
        ports = _free_ports(2 * self.nodes)
        ids = range(1, self.nodes + 1)
        voters = ",".join(f"{i}@{LOOPBACK}:{ports[2 * (i - 1) + 1]}" for i in ids)
        cluster_id = random_cluster_id()
        for i in ids:
            node_dir = root / f"node-{i}"
            self.brokers[i] = EmbeddedBroker(
                port=ports[2 * (i - 1)],
                controller_port=ports[2 * (i - 1) + 1],
                data_dir=node_dir,
                log_path=node_dir / "broker.log",
                startup_timeout_s=self.startup_timeout_s,
                node_id=i,
                voters=voters,
                cluster_id=cluster_id,
                replicas=self.nodes,
                security=security,
            )
        try:
            for b in self.brokers.values():
                b.data_dir.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
                b.launch()
            for b in self.brokers.values():
                b.wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def kill(self, node_id: int) -> None:
        """Crash one node (SIGKILL)."""
        self.brokers[node_id].kill()

    def start_node(self, node_id: int) -> None:
        """Bring a killed or stopped node back with its data; returns once it serves."""
        self.brokers[node_id].start()

    def running(self) -> list[int]:
        return [i for i, b in self.brokers.items() if b.running]

    def log_paths(self) -> dict[int, Path]:
        return {i: b.log_path for i, b in self.brokers.items() if b.log_path is not None}

    def leader(self, topic: str, partition: int = 0, timeout_s: float = 10.0) -> int:
        """The node leading ``topic``'s ``partition`` now (-1: none, e.g. during failover)."""
        live = ",".join(self.brokers[i].bootstrap for i in self.running())
        admin = AdminClient({"bootstrap.servers": live, "log_level": 0, **self.client_settings()})
        meta = admin.list_topics(topic, timeout=timeout_s)
        return int(meta.topics[topic].partitions[partition].leader)

    def client_settings(self, user: str | None = None) -> dict[str, str]:
        """Client settings (librdkafka names) of ``user`` (default: the admin) of a secured
        cluster; none of a plaintext one."""
        first = next(iter(self.brokers.values()), None)
        return first.client_settings(user) if first is not None else {}

    def controller(self) -> int:
        """The active controller (the KRaft quorum's leader), as a live node records it."""
        for i in self.running():
            b = self.brokers[i]
            assert b.data_dir is not None
            state = b.data_dir / "kraft-logs" / "__cluster_metadata-0" / "quorum-state"
            try:
                leader = int(json.loads(state.read_text()).get("leaderId", -1))
            except (OSError, ValueError):
                continue
            if leader in self.brokers and self.brokers[leader].running:
                return leader
        return -1

    def stop(self, timeout_s: float = 20.0) -> None:
        """Stop every node at once: one by one, the last ones wait for a controller quorum
        that is already gone (a minute for three nodes)."""
        try:
            with ThreadPoolExecutor(max(1, len(self.brokers))) as pool:
                list(pool.map(lambda b: b.stop(timeout_s), self.brokers.values()))
        finally:
            self.brokers.clear()
            tmp, self._tmp = self._tmp, None
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
