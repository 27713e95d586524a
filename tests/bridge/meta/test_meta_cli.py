"""`dts meta serve` as a real subprocess, driven by the `dts meta ...` commands; Ctrl-C stops it."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from bridge.cli import cli


def _popen_serve(warehouse: Path, *extra: str) -> subprocess.Popen[str]:
    """`dts meta serve` on a free port, its output (address line first) on a pipe."""
    return subprocess.Popen(
        [sys.executable, "-m", "bridge", "meta", "serve", "--port", "0",
         "--warehouse", str(warehouse), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _serve(warehouse: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    proc = _popen_serve(warehouse, *extra)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
    if m is None:
        proc.kill()
        raise AssertionError(f"no address printed: {line!r} {proc.stdout.read()}")
    return proc, m.group(1)


def _announced(proc: subprocess.Popen[str]) -> str:
    """The lines a started service printed after its address, up to "Ctrl-C stops it"
    (read here: ``communicate`` would miss what a readline already buffered)."""
    assert proc.stdout is not None
    lines = []
    while not lines or "Ctrl-C stops it" not in lines[-1]:
        line = proc.stdout.readline()
        assert line, "".join(lines)
        lines.append(line)
    return "".join(lines)


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    return out


def _dts(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def _register(
    url: str, kind: str, job_id: str, *, sink: str, sources: tuple[str, ...] = ()
) -> tuple[int, str]:
    """``dts meta jobs register`` of one job writing ``sink``."""
    args = ["meta", "jobs", "register", "--kind", kind, "--job-id", job_id, "--url", url]
    for source in sources:
        args += ["--source", source]
    return _dts(*args, "--sink", sink)


def test_serve_and_every_command(warehouse: Path) -> None:
    proc, url = _serve(warehouse, "--heartbeat-timeout-ms", "60000")
    try:
        u = ["--url", url]
        code, out = _register(url, "worker", "w0", sink="db.t0")
        assert code == 0 and "job_id=w0" in out and "state=running" in out
        assert _register(url, "spark-streaming", "s1", sources=("db.t0",), sink="db.t1")[0] == 0
        code, out = _register(url, "spark-batch", "bad", sources=("db.t1",), sink="db.t0")
        assert code == 1 and "writer_conflict" in out and "job w0" in out
        _dts("meta", "jobs", "finish", "w0", *u)
        code, out = _register(url, "spark-batch", "bad", sources=("db.t1",), sink="db.t0")
        assert code == 1 and "cycle" in out and "db.t1 -> db.t0 -> db.t1" in out
        for b in (1000, 2000):
            assert (
                _dts("meta", "report", "db.t0", str(b), "--snapshot-id", str(b // 1000), *u)[0] == 0
            )
        assert (
            _dts("meta", "report", "db.t1", "1000", "--snapshot-id", "7", "--job-id", "s1", *u)[0]
            == 0
        )
        code, out = _dts("meta", "consistent-version", "db.t0", "db.t1", *u)
        assert code == 0 and "read at barrier 1000" in out and "db.t1" in out
        code, out = _dts(
            "meta", "consistent-version", "db.t0", "db.t1", "--mode", "weak", "--json", *u
        )
        assert json.loads(out)["tables"][0]["barrier"] == 2000
        code, out = _dts("meta", "lineage", "db.t1", *u)
        assert code == 0 and "upstream (reads from)" in out and "```mermaid" in out
        assert _dts("meta", "lineage", *u)[1].startswith("flowchart LR")
        code, out = _dts("meta", "trace", "db.t1", *u)
        assert code == 0 and "job s1" in out
        assert "latest_barrier=2000" in _dts("meta", "tables", *u)[1]
        assert "barrier=2000" in _dts("meta", "barriers", "db.t0", *u)[1]
        assert "state=running" in _dts("meta", "jobs", "heartbeat", "s1", *u)[1]
        assert "job_id=s1" in _dts("meta", "jobs", "show", "s1", *u)[1]
        listed = json.loads(_dts("meta", "jobs", "list", "--json", *u)[1])
        assert {j["job_id"] for j in listed} == {"w0", "s1"}
        assert _dts("meta", "jobs", "forget", "w0", *u)[0] == 0
    finally:
        out = _stop(proc)
    assert "MetaService stopped" in out
    assert (warehouse / "_meta" / "meta.db").exists()


def test_two_serve_processes_share_one_database(warehouse: Path) -> None:
    one, url1 = _serve(warehouse)
    two, url2 = _serve(warehouse)
    try:
        assert _register(url1, "worker", "w1", sink="db.t")[0] == 0
        code, out = _register(url2, "worker", "w2", sink="db.t")
        assert code == 1 and "job w1" in out
    finally:
        _stop(one)
        _stop(two)


def test_unreachable_service_is_a_clear_error() -> None:
    code, out = _dts("meta", "tables", "--url", "http://127.0.0.1:9")
    assert code == 1 and "unreachable" in out


def test_serve_listens_before_it_says_so(warehouse: Path) -> None:
    """The printed address takes connections at once, even while the server process is
    stopped right after printing it (a loaded machine): the socket listens before the print."""
    import socket

    proc = _popen_serve(warehouse)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    proc.send_signal(signal.SIGSTOP)  # frozen between the print and whatever follows it
    try:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        assert m, line
        with socket.create_connection(("127.0.0.1", int(m.group(1))), timeout=5):
            pass  # accepted into the backlog: no "connection refused"
    finally:
        proc.send_signal(signal.SIGCONT)
        if m:  # serving once thawed
            assert httpx.get(f"http://127.0.0.1:{m.group(1)}/health", timeout=30).status_code == 200
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out


def test_serve_with_tokens_from_the_environment(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DTS_META_TOKEN", "jobs-token")
    monkeypatch.setenv("DTS_META_ADMIN_TOKEN", "ops-token")
    proc, url = _serve(warehouse)  # the child inherits both tokens
    try:
        assert _register(url, "worker", "w1", sink="db.t")[0] == 0
        code, out = _dts("meta", "jobs", "list", "--url", url)
        assert code == 0 and "w1" in out
        monkeypatch.delenv("DTS_META_ADMIN_TOKEN")
        code, out = _dts("meta", "jobs", "finish", "w1", "--state", "cancelled", "--url", url)
        assert code == 1 and "forbidden" in out and "DTS_META_ADMIN_TOKEN" in out
        monkeypatch.delenv("DTS_META_TOKEN")
        code, out = _dts("meta", "jobs", "list", "--url", url)
        assert code == 1 and "unauthorized" in out
        monkeypatch.setenv("DTS_META_ADMIN_TOKEN", "ops-token")
        code, out = _dts("meta", "jobs", "finish", "w1", "--state", "cancelled", "--url", url)
        assert code == 0 and "cancelled" in out, out
        health = httpx.get(f"{url}/health").json()
        assert health["auth"] == "bearer" and str(warehouse) not in json.dumps(health)
    finally:
        _stop(proc)


def test_serve_without_a_token_stays_on_loopback(warehouse: Path) -> None:
    code, out = _dts(
        "meta", "serve", "--host", "0.0.0.0", "--port", "0", "--warehouse", str(warehouse)
    )
    assert code == 2 and "without a token" in out and "DTS_META_TOKEN" in out


def test_serve_keeps_the_newest_barriers_it_is_told(warehouse: Path) -> None:
    """``--keep-barriers`` reaches the housekeeping (which prunes at start and every
    minute) and the lines the service starts with, as does whether it keeps holds; 0 is
    refused."""
    import time

    from bridge.meta.client import MetaClient
    from bridge.meta.models import TableBarrierReport

    proc, url = _serve(warehouse, "--keep-barriers", "3")
    try:
        out = _announced(proc)
        with MetaClient(url) as client:
            client.register_job("spark-streaming", [], ["db.kept"], job_id="w1")
            reports = [
                TableBarrierReport(table="db.kept", barrier=b, snapshot_id=b, job_id="w1")
                for b in range(1, 11)
            ]
            client.report_barriers(reports)
    finally:
        _stop(proc)
    assert "barriers     the newest 3 of each table kept" in out  # says so as it starts
    assert f"holds        consistent versions' snapshots kept in {warehouse}" in out
    # pruned as it starts
    proc, url = _serve(warehouse, "--keep-barriers", "3", "--no-hold-consistent")
    try:
        out = _announced(proc)
        with MetaClient(url) as client:
            until = time.monotonic() + 30
            while len(client.barriers("db.kept")) > 3 and time.monotonic() < until:
                time.sleep(0.1)
            assert [r.barrier for r in client.barriers("db.kept")] == [10, 9, 8]
    finally:
        _stop(proc)
    assert "holds        none (--no-hold-consistent, or no --warehouse)" in out
    code, out = _dts("meta", "serve", "--keep-barriers", "0")
    assert code != 0 and "--keep-barriers" in out
