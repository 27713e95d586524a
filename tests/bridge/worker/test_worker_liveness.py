"""Liveness: a warehouse that turns read-only while the worker commits, then writable.

The worker must keep running, show the error in /status and /metrics while it
lasts, resume by itself once the cause clears, and lose or duplicate nothing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bridge.worker.support import (
    BackgroundProducer,
    Changelog,
    assert_all_barriers_match,
    create_table,
    latest_barrier,
    log_writer,
    start_worker,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

# read-only for four times the worker's longest retry backoff (5 s): it retries, reports
# itself unhealthy and keeps running, never giving up on the table
READ_ONLY_S = 20.0


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make ``path`` a read-only filesystem (EROFS, as a full or failed disk remounted
    read-only) with bind mounts; root only. The read-only view is made on a side path
    nobody writes through (remounting a mount with open writers fails with EBUSY),
    then bound over ``path``; both mounts are private, so nothing propagates and
    nothing stays mounted afterwards."""
    view = Path(tempfile.mkdtemp(prefix="dts-ro-view-"))
    try:
        _mount("--bind", str(path), str(view))
        _mount("--make-private", str(view))
        _mount("-o", "remount,bind,ro", str(view))
        _mount("--bind", str(view), str(path))
        _mount("--make-private", str(path))
        yield
    finally:
        for target in (path, view):
            while _mounted(target):
                subprocess.run(["umount", "--lazy", str(target)], check=True)
        view.rmdir()


def _mounted(target: Path) -> bool:
    """A mount point at ``target`` (bind mounts of the same filesystem included, which
    ``os.path.ismount`` cannot see)."""
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return str(target.resolve()) in points


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def can_mount(tmp_path: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    probe = tmp_path / "mount-probe"
    probe.mkdir()
    try:
        with read_only(probe):
            try:
                (probe / "x").touch()
            except OSError:
                return True
            return False
    except (subprocess.CalledProcessError, OSError):
        return False


def metric(port: int, name: str, table: str) -> float | None:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    total = None
    for line in body.splitlines():
        if line.startswith(name) and f'table="{table}"' in line:
            total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
    return total


def test_read_only_warehouse_then_writable_resumes_without_restart(  # type: ignore[no-untyped-def]
    broker, warehouse: Path, tmp_path: Path
) -> None:
    if not can_mount(tmp_path):
        pytest.skip("needs root and bind mounts to make the warehouse read-only")
    table = create_table(warehouse)
    log = Changelog(seed=11)
    writer = log_writer(table, broker.bootstrap)
    worker = start_worker(
        warehouse, broker.bootstrap, [table.name], f"g-{uuid.uuid4().hex[:8]}", tmp_path
    )
    try:
        with BackgroundProducer(writer, log, rows=100, pause_s=0.3) as producer:
            wait_for(lambda: latest_barrier(table) is not None, 60, "first commits", worker)
            with read_only(warehouse):
                ro_start = time.monotonic()
                wait_for(
                    lambda: worker.table_status(table.name).get("healthy") is False,
                    30,
                    "the error in /status",
                    worker,
                )
                st = worker.table_status(table.name)
                assert "Read-only file system" in (st["last_error"] or ""), st
                assert (
                    metric(worker.web_port, "dts_worker_table_errors_total", table.name) or 0
                ) > 0
                assert metric(worker.web_port, "dts_worker_table_healthy", table.name) == 0
                # stalled, with where (every owned partition's offset) and why (issue 40)
                stalled = st["stalled"]
                assert stalled is not None, st
                assert stalled["reason"] in ("commit: OSError", "data: OSError"), stalled
                assert "Read-only file system" in stalled["detail"], stalled
                owned = {b["bucket"]: b["next_offset"] for b in st["buckets"]}
                assert {p["partition"] for p in stalled["partitions"]} == set(owned), stalled
                assert metric(worker.web_port, "dts_worker_table_stalled", table.name) == 1
                assert metric(worker.web_port, "dts_worker_table_stall_offset", table.name)
                stuck_at = latest_barrier(table)
                time.sleep(max(READ_ONLY_S - (time.monotonic() - ro_start), 0))
                assert latest_barrier(table) == stuck_at  # really nothing could be committed
                assert worker.proc.poll() is None, "the worker keeps running"
            writable = time.monotonic()
            # resumed: a first commit past where it stood. Not every barrier the read-only
            # 20 s piled up (about 65, each a snapshot): catching those up took over 30 s
            # with the other core busy; the end of the test waits for all of them
            wait_for(
                lambda: (latest_barrier(table) or 0) > (stuck_at or 0),
                30,
                "commits to resume after the warehouse is writable again",
                worker,
            )
            resumed_s = time.monotonic() - writable
            print(f"commits resumed {resumed_s:.1f}s after the warehouse became writable")
            wait_for(
                lambda: worker.table_status(table.name).get("healthy") is True,
                30,
                "/status healthy again",
                worker,
            )
            assert metric(worker.web_port, "dts_worker_table_healthy", table.name) == 1
            assert worker.table_status(table.name)["stalled"] is None
            assert metric(worker.web_port, "dts_worker_table_stalled", table.name) == 0
            assert metric(worker.web_port, "dts_worker_table_stall_offset", table.name) is None
            barriers = producer.stop()
        # the backlog: every barrier of the run, each its own snapshot (about 150)
        wait_for(lambda: latest_barrier(table) == barriers[-1], 180, "every barrier", worker)
        assert_all_barriers_match(table, log, barriers)
    finally:
        writer.close(final_barrier=False)
        code = worker.stop()
    assert code == 0, worker.tail()
