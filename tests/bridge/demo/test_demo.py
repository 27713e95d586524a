"""`dts demo` end to end, as a user runs it: a subprocess, its output, and what it leaves behind.

Every process the demo starts (broker, MetaService, worker, the Spark JVM and its Python
workers) inherits the environment, so a marker variable finds any survivor in /proc.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bridge.demo.report import EXPLORE_END
from filestore import Catalog
from tests.bridge.demo.runs import (
    assert_nothing_left,
    demo_env,
    interrupt,
    start_demo,
    tail,
    wait_for_output,
)
from tests.bridge.demo.support import CHROMIUM, load

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.kafka, pytest.mark.apache_kafka]


@pytest.mark.timeout(480)
def test_demo_runs_end_to_end_keeps_running_and_cleans_up(tmp_path: Path) -> None:
    """The whole demo with `--keep-running` (one run: a demo run costs minutes): every step
    and its report, then the pipeline keeps committing after the report until Ctrl-C stops
    it cleanly (exit 0), and nothing is left behind."""
    import httpx

    run_id = uuid.uuid4().hex
    warehouse = tmp_path / "kept-warehouse"
    out = tmp_path / "demo.out"
    proc = start_demo(
        ["--warehouse", str(warehouse), "--keep-running"], demo_env(tmp_path / "tmp", run_id), out
    )
    try:
        wait_for_output(proc, out, EXPLORE_END, 300)
        deadline = time.monotonic() + 120
        status_url = re.search(r"curl -s (http://127\.0\.0\.1:\d+/status)", out.read_text())
        assert status_url, tail(out.read_text(errors="replace"))

        def committed() -> int:
            tables = httpx.get(status_url.group(1), timeout=5).json()["tables"]
            return max(int(t.get("last_barrier_committed") or 0) for t in tables.values())

        first = committed()
        # the generator writes every 2 s and the worker keeps committing barriers
        while committed() <= first:
            assert proc.poll() is None, tail(out.read_text(errors="replace"))
            assert time.monotonic() < deadline, "no barrier committed while kept running"
            time.sleep(1)
    finally:
        code = interrupt(proc)
    output = out.read_text(errors="replace")
    assert code == 0, tail(output)
    assert "Ctrl-C: stopping the demo" in output

    # it showed where to look while it ran
    assert re.search(r"worker /metrics\s+.*http://127\.0\.0\.1:\d+/metrics", output)
    assert re.search(r"worker /status\s+.*http://127\.0\.0\.1:\d+/status", output)
    assert re.search(r"MetaService\s+.*http://127\.0\.0\.1:\d+", output)
    # the strong read agreed at one barrier; the weak one was printed for contrast
    m = re.search(r"strong consistent read at barrier (\d+): agreed", output)
    assert m, tail(output)
    assert "weak read (each table's latest" in output
    assert "Time travel: demo.customers at barrier" in output
    assert "CTAS table demo.top_customers present with 5 rows" in output
    assert "table visible: no; staging left: nothing" in output

    # one clear line for the deliberate CTAS failure, no Java stack traces (until Ctrl-C:
    # a stop cancels the micro-batch in flight, which Spark may log as it dies)
    ran = output.split("Ctrl-C: stopping the demo")[0]
    assert "\tat org.apache" not in ran and "ERROR Utils" not in ran, tail(ran)
    # tables at full width though the output is a file, not a terminal
    assert "\u2026" not in output, tail(output)
    # the run's logs and report are kept where it said
    kept = re.search(r"kept in (\S+): logs/", output)
    assert kept, tail(output)
    run_dir = Path(kept.group(1))
    assert run_dir.parent == tmp_path / "demo-runs"
    worker_log = (run_dir / "logs" / "worker.log").read_text(errors="replace")
    assert worker_log and "\x1b[" not in worker_log  # plain lines, no terminal escapes
    report = run_dir / "report.html"
    assert f"report: {report.as_uri()}" in output
    if CHROMIUM is not None:
        page = load(report)
        assert page.console == []
        # freshness of every table and the consistent lag of the derived ones, with samples
        assert page.count("trace scatter") >= 5 + 2, page.dom[:500]
        assert page.count("point") >= 20

    # --warehouse kept everything the demo made
    cat = Catalog(str(warehouse))
    assert set(cat.list_tables("demo")) == {
        "demo.customers",
        "demo.orders",
        "demo.orders_enriched",
        "demo.customer_totals",
        "demo.top_customers",
    }
    top = cat.get_table("demo.top_customers")
    assert top.read().num_rows == 5 and len(top.snapshots()) == 1
    barrier = int(m.group(1))
    for name in ("demo.orders", "demo.orders_enriched", "demo.customer_totals"):
        assert barrier in {s.barrier for s in cat.get_table(name).snapshots()}, name
    assert_nothing_left(run_id, output, tmp_path / "tmp")


def test_demo_clean_removes_only_what_the_demo_made(tmp_path: Path) -> None:
    from bridge.demo.rundir import new_run_dir

    root = tmp_path / "demo-runs"
    first, second = new_run_dir(root), new_run_dir(root)
    (first / "logs").mkdir()
    env = {**os.environ, "DTS_DEMO_DIR": str(root)}

    def clean(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bridge", "demo", "--clean", *args],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip

    done = clean()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"removed {root} (2 runs: {first.name}, {second.name})"
    assert not root.exists()
    assert clean().stdout.strip() == f"nothing to remove: {root} does not exist"
    # a directory the demo did not make is never removed
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    refused = clean("--dir", str(other))
    assert refused.returncode == 1
    assert "Traceback" not in refused.stderr
    assert refused.stderr.strip().startswith(f"Error: {other} exists and was not made by")
    assert (other / "notes.txt").exists()


@pytest.mark.timeout(240)
def test_demo_ctrl_c_stops_everything(tmp_path: Path) -> None:
    run_id = uuid.uuid4().hex
    out = tmp_path / "demo.out"
    proc = start_demo([], demo_env(tmp_path / "tmp", run_id), out)
    try:
        # interrupt once every part runs: services, generator, Spark and its streaming jobs
        wait_for_output(proc, out, "Spark streaming jobs running", 180)
        time.sleep(2)
    finally:
        code = interrupt(proc)
    output = out.read_text(errors="replace")
    assert code == 130, tail(output)
    assert "interrupted: stopping everything" in output
    assert "stopped: every process the demo started has exited" in output
    # Spark's own Python runners may print a traceback when their query is stopped
    # mid-batch; the demo itself must not fail
    assert "bridge/demo/" not in output and "bridge/commands/" not in output, tail(output)
    assert_nothing_left(run_id, output, tmp_path / "tmp")
