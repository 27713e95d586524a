"""Helpers for the worker's end-to-end tests: a random changelog with an oracle,
and `dts worker` subprocesses."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
from confluent_kafka import Consumer, TopicPartition

from filestore import Catalog, Table, bucket_ids
from logstore.localhost import free_port
from logstore.writer import LogWriter

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("n", pa.int64())])
ROOT = Path(__file__).resolve().parents[3]


def create_table(warehouse: Path, buckets: int = 4, options: dict[str, str] | None = None) -> Table:
    name = f"db.t_{uuid.uuid4().hex[:10]}"
    opts = {"bucket": str(buckets), **(options or {})}
    return Catalog(str(warehouse)).create_table(name, SCHEMA, primary_key=["id"], options=opts)


def log_writer(table: Table, bootstrap: str) -> LogWriter:
    from bridge.tables import log_spec_for

    spec = log_spec_for(table)
    keys, n = table.bucket_keys, spec.buckets
    return LogWriter(bootstrap, spec, lambda t: bucket_ids(t, keys, n), barrier_interval_s=None)


@dataclass
class Changelog:
    """Random inserts/updates/deletes over a small key space, with the state at each barrier."""

    seed: int = 0
    keys: int = 300
    state: dict[int, tuple[str, int]] = field(default_factory=dict)
    oracle: dict[int, dict[int, tuple[str, int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.counter = 0

    def batch(self, n: int) -> pa.Table:
        ids, vs, ns, kinds = [], [], [], []
        for _ in range(n):
            k = self.rng.randrange(self.keys)
            self.counter += 1
            if k in self.state and self.rng.random() < 0.25:
                v, m = self.state.pop(k)
                kinds.append("-D")
            else:
                v, m = f"v{self.counter}", self.counter
                kinds.append("+U" if k in self.state else "+I")
                self.state[k] = (v, m)
            ids.append(k)
            vs.append(v)
            ns.append(m)
        return pa.table({"id": ids, "v": vs, "n": ns, "_row_kind": kinds}).cast(
            pa.schema([*SCHEMA, pa.field("_row_kind", pa.string())])
        )

    def close_barrier(self, barrier: int) -> None:
        self.oracle[barrier] = dict(self.state)

    def expected(self, barrier: int) -> list[tuple[int, str, int]]:
        return sorted((k, v, n) for k, (v, n) in self.oracle[barrier].items())


def produce(
    writer: LogWriter, log: Changelog, barriers: int, rows_per_barrier: int, pause_s: float = 0.0
) -> list[int]:
    ids = []
    for _ in range(barriers):
        if rows_per_barrier:
            writer.write(log.batch(rows_per_barrier))
        b = writer.barrier()
        log.close_barrier(b)
        ids.append(b)
        if pause_s:
            time.sleep(pause_s)
    return ids


def rows_at(table: Table, barrier: int) -> list[tuple[int, str, int]]:
    t = table.read(barrier=barrier, columns=["id", "v", "n"])
    return sorted(
        zip(
            t.column("id").to_pylist(),
            t.column("v").to_pylist(),
            t.column("n").to_pylist(),
            strict=True,
        )
    )


def barrier_snapshots(table: Table) -> dict[int, int]:
    """barrier -> snapshot id, over the worker's snapshots."""
    return {s.barrier: s.id for s in table.snapshots() if s.barrier is not None}


def wait_for(
    cond: Callable[[], bool],
    timeout_s: float,
    what: str,
    worker: WorkerProc | None = None,
    poll_s: float = 0.1,
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        _check_alive(worker, what)
        time.sleep(poll_s)
    tail = f":\n{worker.tail()}" if worker is not None else ""
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}{tail}")


def _check_alive(worker: WorkerProc | None, what: str) -> None:
    if worker is not None and worker.proc.poll() is not None:
        raise AssertionError(
            f"worker exited with {worker.proc.returncode} while waiting for {what}:\n"
            f"{worker.tail()}"
        )


def wait_for_catch_up(
    committed: Callable[[], int | None],
    last: int,
    stall_s: float,
    what: str,
    worker: WorkerProc | None = None,
    poll_s: float = 0.1,
) -> None:
    """Wait until ``committed()`` reaches barrier ``last``; fail once it has not moved for
    ``stall_s``. A worker catching up commits one barrier at a time, and on a loaded
    machine each commit takes longer (on S3 under a CPU hog, a fixed 120 s wait ended
    while the worker was still committing, a barrier every 2-7 s): the failure that
    matters is a worker that stopped committing, not one that is slow. The test's own
    timeout bounds the whole."""
    seen, moved = committed(), time.monotonic()
    while (seen or 0) < last:
        _check_alive(worker, what)
        if time.monotonic() - moved > stall_s:
            tail = f":\n{worker.tail()}" if worker is not None else ""
            raise AssertionError(
                f"no barrier committed for {stall_s}s while waiting for {what} "
                f"(at {seen}, waiting for {last}){tail}"
            )
        time.sleep(poll_s)
        now = committed()
        if now != seen:
            seen, moved = now, time.monotonic()
    assert seen == last, f"{what}: committed barrier {seen} is past the last one written, {last}"


def latest_barrier(table: Table) -> int | None:
    """Greatest barrier committed (a compaction snapshot on top may carry none): the
    newest snapshot's that has one, since a table's barriers only rise. Reading back to
    it, not every snapshot: tests poll this every 0.1 s, and on S3 (moto) reading all of
    a growing history each time slowed the workers' own commits past the tests' waits."""
    walk = table.snapshot_manager.iter_backwards()
    return next((s.barrier for s in walk if s.barrier is not None), None)


@dataclass
class WorkerProc:
    proc: subprocess.Popen[bytes]
    web_port: int
    log_path: Path

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            # never left running behind the test: killed, and the test fails saying so
            self.proc.kill()
            self.proc.wait(timeout=30)
            raise AssertionError(
                f"the worker did not stop within {timeout_s:g}s of signal {sig}; killed:\n"
                f"{self.tail()}"
            ) from None

    def status(self) -> dict[str, Any]:
        """The worker's /status page ({} while it does not answer)."""
        import json
        import urllib.request

        try:
            body = urllib.request.urlopen(
                f"http://127.0.0.1:{self.web_port}/status", timeout=2
            ).read()
        except OSError:
            return {}
        return dict(json.loads(body))

    def table_status(self, table: str) -> dict[str, Any]:
        """``table``'s entry of the worker's /status page ({} while it does not answer)."""
        return dict(self.status().get("tables", {}).get(table, {}))

    def metric(self, name: str) -> float | None:
        """The value of an unlabelled-but-``job`` metric on /metrics (None: not there)."""
        import urllib.request

        try:
            body = urllib.request.urlopen(
                f"http://127.0.0.1:{self.web_port}/metrics", timeout=2
            ).read()
        except OSError:
            return None
        for line in body.decode().splitlines():
            if line.startswith(f"{name}{{") or line.startswith(f"{name} "):
                return float(line.rsplit(" ", 1)[1])
        return None

    def owned_buckets(self, table: str) -> set[int]:
        """Buckets of ``table`` this worker owns now, from its /status page."""
        return {b["bucket"] for b in self.table_status(table).get("buckets", [])}

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self, lines: int = 40) -> str:
        """The end of the worker's log, without librdkafka's connection chatter."""
        keep = [line for line in self.output().splitlines() if "rdkafka" not in line]
        return "\n".join(keep[-lines:])


def start_worker(
    warehouse: Path | str,
    bootstrap: str,
    tables: list[str],
    group: str,
    log_dir: Path,
    env: dict[str, str] | None = None,
    extra_args: list[str] | None = None,
) -> WorkerProc:
    port = free_port()
    log_path = log_dir / f"worker-{uuid.uuid4().hex[:6]}.log"
    cmd = [
        sys.executable,
        "-m",
        "bridge",
        "worker",
        "--warehouse",
        str(warehouse),
        "--bootstrap",
        bootstrap,
        "--group",
        group,
        "--web-port",
        str(port),
        "--log-level",
        "info",
        "--session-timeout",
        "3",
        *[a for t in tables for a in ("--tables", t)],
        *(extra_args or []),
    ]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=full_env)
    return WorkerProc(proc, port, log_path)


class BackgroundProducer:
    """Closes a barrier with ``rows`` random changes every ``pause_s`` until stopped.

    ``followers`` (writer, changelog) write their own changes and close each barrier with
    the same id right after ``writer``, as tables fed by one source do: tables that can be
    read together at any barrier both completed.
    """

    def __init__(
        self,
        writer: LogWriter,
        log: Changelog,
        rows: int,
        pause_s: float,
        followers: list[tuple[LogWriter, Changelog]] | None = None,
    ) -> None:
        import threading

        self.writer, self.log, self.rows, self.pause_s = writer, log, rows, pause_s
        self.followers = followers or []
        self.barriers: list[int] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._turn = threading.Lock()  # held while a barrier is written, and by paused()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                with self._turn:
                    if self._stop.is_set():
                        break
                    for w, log in self.followers:
                        w.write(log.batch(self.rows))
                    [barrier] = produce(self.writer, self.log, 1, self.rows)
                    for w, log in self.followers:
                        log.close_barrier(w.barrier(barrier))
                    self.barriers.append(barrier)
                self._stop.wait(self.pause_s)
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No barrier is written inside, and none is half-written on entry (it waits for
        the one in flight)."""
        with self._turn:
            yield

    def __enter__(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def stop(self) -> list[int]:
        self._stop.set()
        self._thread.join(timeout=30)
        if self.error is not None:
            raise self.error
        return self.barriers

    def __exit__(self, *exc: object) -> None:
        self.stop()


def commit_latency(
    producer: BackgroundProducer,
    committed: Callable[[], int | None],
    timeout_s: float = 60,
    worker: WorkerProc | None = None,
    poll_s: float = 0.1,
) -> float:
    """Seconds until a barrier newer than the last one the writer had closed is committed
    (``committed``: the table's latest barrier): the pipeline's end-to-end delay, or, called
    right after a fault or a repair, its stall."""
    written = producer.barriers[-1]
    t0 = time.monotonic()
    wait_for(
        lambda: (committed() or 0) > written, timeout_s, "a new barrier committed", worker, poll_s
    )
    return time.monotonic() - t0


def assert_all_barriers_match(table: Table, log: Changelog, barriers: list[int]) -> None:
    snaps = barrier_snapshots(table)
    assert sorted(snaps) == barriers, "every barrier has exactly one snapshot, in order"
    ids = [snaps[b] for b in barriers]
    assert ids == sorted(ids)
    for b in barriers:
        assert rows_at(table, b) == log.expected(b), f"barrier {b}"


@dataclass
class MetaProc:
    """`dts meta serve` in a subprocess (a real MetaService on its own SQLite file)."""

    proc: subprocess.Popen[bytes]
    url: str
    port: int
    db: str
    log_path: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start_meta(
    tmp_path: Path,
    port: int | None = None,
    db: str | None = None,
    env: dict[str, str] | None = None,
) -> MetaProc:
    """``env`` over the test's environment (a token: ``DTS_META_TOKEN``)."""
    import urllib.request

    port = port or free_port()
    db = db or f"sqlite:///{tmp_path / f'meta-{uuid.uuid4().hex[:6]}.db'}"
    log_path = tmp_path / f"meta-{port}-{uuid.uuid4().hex[:4]}.log"
    cmd = [sys.executable, "-m", "bridge", "meta", "serve", "--port", str(port), "--db", db]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, **(env or {})}
        )
    meta = MetaProc(proc, f"http://127.0.0.1:{port}", port, db, log_path)
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{meta.url}/health", timeout=1).read()
            return meta
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                meta.stop()
                raise AssertionError(
                    f"MetaService did not start:\n{log_path.read_text()}"
                ) from None
            time.sleep(0.1)


def plain_records(table: pa.Table, buckets: int, keys: list[str]) -> list[tuple[int, bytes]]:
    """Each row as a plain producer writes it (a create without a source block), with the
    partition its key hashes to."""
    parts = bucket_ids(table, keys, buckets).tolist()
    return [
        (p, orjson.dumps({"before": None, "after": row, "op": "c", "ts_ms": 1}))
        for p, row in zip(parts, table.to_pylist(), strict=True)
    ]


def dead_letters(bootstrap: str, topic: str, expected: int) -> list[dict[str, str]]:
    """The headers of the dead letters in ``topic`` (waits for ``expected``, then looks for
    more: one too many is a record dead-lettered twice)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"dlq-check-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    out: list[dict[str, str]] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while len(out) < expected and time.monotonic() < deadline:
            for m in c.consume(100, timeout=0.5):
                if m.error() is None:
                    out.append({k: v.decode() for k, v in (m.headers() or [])})
        # anything more than expected would be a double dead letter
        out += [
            {k: v.decode() for k, v in (m.headers() or [])}
            for m in c.consume(100, timeout=1.0)
            if m.error() is None
        ]
    finally:
        c.close()
    return out


def tagged_rows(ids: range, tag: str) -> pa.Table:
    """Rows ``id`` in ``ids``, ``v`` = tag + id (who wrote them), ``n`` = id."""
    return pa.table(
        {"id": list(ids), "v": [f"{tag}{i}" for i in ids], "n": list(ids)}, schema=SCHEMA
    )
