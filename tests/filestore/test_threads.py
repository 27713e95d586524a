"""The FileStore's one pool of threads: kept across calls, never waiting on itself, and
a forked child's own; and its decode slots, which bound polars' threads."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from filestore.read._polars_parquet import read_frame
from filestore.threads import (
    IO_THREADS_PER_SLOT,
    POLARS_IO_THREADS_ENV,
    decode_slot,
    parallel_map,
)

ROOT = Path(__file__).resolve().parents[2]


def _thread(_: object) -> tuple[int, str]:
    t = threading.current_thread()
    return t.ident or 0, t.name


def test_results_come_in_order_from_the_same_threads_call_after_call() -> None:
    assert parallel_map(lambda x: x * x, range(50)) == [x * x for x in range(50)]
    seen = {ident for _ in range(100) for ident, _name in parallel_map(_thread, range(8))}
    # a pool per call would have started up to 200 threads
    assert 1 <= len(seen) <= (os.cpu_count() or 1)
    assert all(name.startswith("filestore") for _i, name in parallel_map(_thread, range(4)))


def test_one_item_runs_in_the_callers_thread() -> None:
    assert parallel_map(_thread, [0]) == [_thread(0)]
    assert parallel_map(_thread, []) == []


def test_work_submitted_from_the_pools_own_threads_runs_there() -> None:
    """Every pool thread waiting on tasks queued behind it would wait for ever."""

    def outer(i: int) -> list[tuple[int, str]]:
        here = _thread(i)
        inner = parallel_map(_thread, range(4))
        assert set(inner) == {here}  # inline, in the pool thread that asked
        return inner

    done: list[object] = []
    worker = threading.Thread(
        target=lambda: done.append(parallel_map(outer, range(4 * (os.cpu_count() or 1))))
    )
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive() and len(done) == 1


def test_a_forked_child_starts_a_pool_of_its_own() -> None:
    parallel_map(_thread, range(4))  # the parent's pool exists
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's threads are not here
        try:
            ok = parallel_map(lambda x: x + 1, range(8)) == list(range(1, 9))
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1" and status == 0


_READER = """
import os, sys
import numpy as np, pyarrow as pa
from bench.soak.procs import thread_names
from filestore import Catalog
wh, reads = sys.argv[1], int(sys.argv[2])
schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
t = Catalog(wh).create_table(
    "db.t", schema, primary_key=["id"], options={"bucket": "4", "auto-compaction": "false"}
)
rng = np.random.default_rng(1)
for _ in range(3):  # overlapping runs: every read merges four buckets in the pool
    ids = rng.permutation(60_000)[:40_000]
    w = t.new_write("w")
    w.write(pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]}))
    w.commit()

def pressure() -> bool:
    return any(n.startswith("polars-ooc-deca") for n in thread_names(os.getpid()))

for i in range(reads):
    Catalog(wh).get_table("db.t").read()
    if pressure():
        print(f"polars' out-of-core pressure thread after {i + 1} reads")
        sys.exit(1)
"""


def test_many_reads_leave_polars_memory_count_true(tmp_path: Path) -> None:
    """Through real polars and files, in a process of its own (the budget is read when
    polars loads): with a pool a read, polars' per-thread allocation counts stranded by
    the ended threads made it believe a 128 MB budget spent within 29 reads and start its
    out-of-core pressure thread; with the one pool, 300 reads do not."""
    env = {**os.environ, "POLARS_OOC_MEMORY_BUDGET_MB": "128", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _READER, str(tmp_path / "wh"), "300"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


_CALLERS = """
import os, sys, threading
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from bench.soak.procs import thread_names
from filestore.read._polars_parquet import read_frame
files = []
for i in range(16):
    files.append(os.path.join(sys.argv[1], f"f{i}.parquet"))
    pq.write_table(pa.table({"a": np.arange(20_000) + i}), files[-1])

def loop() -> None:
    for _ in range(20):
        # every read whole and right, with more files in flight than I/O threads
        assert read_frame(files, ["a"])["a"].sum() == 16 * sum(range(20_000)) + 20_000 * 120

callers = [threading.Thread(target=loop) for _ in range(16)]
for c in callers:
    c.start()
for c in callers:
    c.join()
names = thread_names(os.getpid())
print(sum(n for name, n in names.items() if name.startswith("tokio")))
"""


def _read_from_sixteen_threads(tmp_path: Path, bound: str | None) -> tuple[int, str]:
    """Polars' threads after the reads, and what the process printed on stderr."""
    env = {k: v for k, v in os.environ.items() if k != POLARS_IO_THREADS_ENV}
    if bound is not None:
        env[POLARS_IO_THREADS_ENV] = bound
    done = subprocess.run(
        [sys.executable, "-c", _CALLERS, str(tmp_path)],
        env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1]), done.stderr


def test_polars_reads_from_many_threads_keep_polars_threads_bounded(tmp_path: Path) -> None:
    """Sixteen threads reading sixteen files each at once (256 file reads asked for at
    once), through real polars in a process of its own: polars' threads stay at its
    async workers (a core's) and two I/O threads a decode slot, and polars' warning that
    its bound was reached is not shown. Without the bound its blocking pool kept 83 and
    145 threads on two cores (14 and 15 with the decode slots alone), and the soak's
    probe stepped from 11 to 26 in an hour."""
    cores = os.cpu_count() or 1
    with_threads, stderr = _read_from_sixteen_threads(tmp_path, None)
    assert with_threads <= cores + IO_THREADS_PER_SLOT * cores
    assert POLARS_IO_THREADS_ENV not in stderr


def test_a_bound_the_user_set_on_polars_io_threads_stands(tmp_path: Path) -> None:
    """With the bound named in the environment (one thread), polars keeps that bound and
    its own warning when it is reached."""
    cores = os.cpu_count() or 1
    with_threads, stderr = _read_from_sixteen_threads(tmp_path, "1")
    assert with_threads <= cores + 1
    assert f"{POLARS_IO_THREADS_ENV} reached (1)" in stderr


def test_a_read_waits_for_a_decode_slot(tmp_path: Path) -> None:
    pq.write_table(pa.table({"a": [1, 2, 3]}), tmp_path / "f.parquet")
    held = [decode_slot() for _ in range(os.cpu_count() or 1)]
    for slot in held:
        slot.__enter__()
    done = threading.Event()

    def read() -> None:
        read_frame([str(tmp_path / "f.parquet")], ["a"])
        done.set()

    reader = threading.Thread(target=read)
    reader.start()
    try:
        assert not done.wait(0.5)  # every slot held: the read waits
    finally:
        for slot in held:
            slot.__exit__(None, None, None)
    assert done.wait(60)
    reader.join()
