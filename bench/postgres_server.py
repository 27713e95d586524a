"""A throw-away PostgreSQL server (Debian's binaries, run as user postgres when started as
root) for the tests and the PostgreSQL benchmark: a data directory per use, 127.0.0.1 and
a free port, a bounded start, stopped by ``pg_ctl`` (fast shutdown) and then by PID.
``logical=True`` sets ``wal_level=logical`` for Debezium's connector; ``restart()`` stops
and starts the server on the same data directory and port (a fault a source's readers
must survive). Where PostgreSQL cannot run, ``PostgresMissing`` says why (the tests skip
on it: tests/postgres.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from logstore.localhost import free_port

BIN = Path("/usr/lib/postgresql/15/bin")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


def _binary(name: str) -> str | None:
    found = shutil.which(name) or str(BIN / name)
    return found if os.path.exists(found) else None


class PostgresMissing(RuntimeError):
    """PostgreSQL cannot run here (its binaries, or a way to run them as non-root)."""


@dataclass
class PostgresServer:
    """One server; ``url`` is user postgres, trust authentication, database postgres."""

    base: Path
    as_user: list[str]
    logical: bool
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def init(self) -> None:
        initdb = _binary("initdb")
        assert initdb is not None
        subprocess.run(
            [
                *self.as_user,
                initdb,
                *("-D", str(self.data), "-A", "trust", "-U", "postgres"),
                "--no-sync",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def start(self) -> None:
        postgres = _binary("postgres")
        assert postgres is not None
        settings = ["-c", "wal_level=logical", "-c", "max_replication_slots=8"]
        self._log = open(self.base / "server.log", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [*self.as_user, postgres, "-D", str(self.data), "-p", str(self.port)]
            + ["-h", "127.0.0.1", "-k", str(self.base), "-F"]
            + (settings if self.logical else []),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                psycopg.connect(self.url).close()
                return
            except psycopg.OperationalError:
                assert self.proc is not None
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(
                        f"PostgreSQL did not start; see {self.base / 'server.log'}"
                    ) from None
                time.sleep(0.2)

    def stop(self) -> None:
        """Fast shutdown (open transactions roll back, clients are cut off), then by PID."""
        if self.proc is None:
            return
        pg_ctl = _binary("pg_ctl")
        if pg_ctl is not None and self.proc.poll() is None:
            subprocess.run(
                [
                    *self.as_user,
                    pg_ctl,
                    "stop",
                    *("-D", str(self.data), "-m", "fast", "-w"),
                    "-t",
                    str(int(STOP_TIMEOUT_S)),
                ],
                capture_output=True,
                timeout=STOP_TIMEOUT_S + 10,
            )
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def restart(self) -> None:
        self.stop()
        self.start()


@contextlib.contextmanager
def postgres_server(logical: bool = False) -> Iterator[PostgresServer]:
    """A started server, removed on the way out (PostgresMissing where it cannot run)."""
    if _binary("initdb") is None or _binary("postgres") is None:
        raise PostgresMissing(
            "PostgreSQL binaries are not installed (make test-tools installs them)"
        )
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        runuser = shutil.which("runuser")
        if runuser is None:
            raise PostgresMissing("running as root without runuser")
        as_user = [runuser, "-u", "postgres", "--"]
    # not under pytest's tmp dir: that one is private to root, and postgres runs as postgres
    base = Path(tempfile.mkdtemp(prefix="dts-pg-"))
    if as_user:
        shutil.chown(base, "postgres")
    server = PostgresServer(base, as_user, logical)
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
