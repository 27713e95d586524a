"""The profile of a benchmark step (``bench.pipeline --profile``, issue #42: the hop that
bounds a pipeline): py-spy's raw stacks and Flight Recorder's samples are summed alike,
and the recorders attach to a real Python process and a real JVM found under a named root
(as a side's PIDs are), and name the function each one was busy in."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.pipeline import profile
from bench.pipeline.probe import cpu_seconds
from bench.profiles import py_spy_profile

RAW = """\
thread (15700): spinner;Thread._bootstrap (threading.py:1002);spin (busy.py:5) 19
thread (15701): worker-2;Thread.run (threading.py:982);wait (q.py:9) 3
thread (15702): worker-3;Thread.run (threading.py:982);spin (busy.py:5) 1
process 12:"python -m pyspark.daemon";thread (15703): MainThread;<module> (w.py:1);read (w.py:7) 2
"""

BUSY_PY = """\
import threading, time
def spin():
    x = 0
    while True:
        x += 1
threading.Thread(target=spin, name="spinner", daemon=True).start()
print("spinning", flush=True)
time.sleep(600)
"""

BUSY_JAVA = """\
public class Busy {
    static long spin(long x) { for (int i = 0; i < 1_000_000; i++) { x = x * 31 + i; } return x; }
    public static void main(String[] args) {
        long x = 0;
        System.out.println("spinning");
        while (true) { x = spin(x); if (x == 42) System.out.println(x); }
    }
}
"""


def test_py_spy_stacks_summed_by_function_and_thread_family(tmp_path: Path) -> None:
    raw = tmp_path / "p.txt"
    raw.write_text(RAW)
    got = py_spy_profile(raw)
    assert got.samples == 25
    assert got.own == {"spin (busy.py:5)": 20, "wait (q.py:9)": 3, "read (w.py:7)": 2}
    # numbered threads count as one family; a process frame (--subprocesses) is not a thread
    assert got.threads == {"spinner": 19, "worker": 4, "MainThread": 2}
    lines = got.lines()
    assert lines[0] == " 80.0%  spin (busy.py:5)"
    assert lines[-1].startswith("  by thread: spinner 76%")


def test_thread_families_drop_spark_task_numbers_and_query_ids() -> None:
    from bench.profiles import _thread_family

    names = [
        "Executor task launch worker for task 3.0 in stage 12.0 (TID 48)",
        "Executor task launch worker for task 0.0 in stage 7.0 (TID 21)",
    ]
    assert {_thread_family(n) for n in names} == {
        "Executor task launch worker for task N in stage N"
    }
    stream = "stream execution thread for orders_enriched [id = 5d0f1c2a-9e0b-4b6e-8f51-2c7d, "
    assert _thread_family(stream + "runId = 0a1b-77]") == (
        "stream execution thread for orders_enriched"
    )
    assert _thread_family("pool-3-thread-1") == "pool-N-thread"
    assert _thread_family("worker-2") == "worker"


def test_report_puts_the_busiest_component_first(tmp_path: Path) -> None:
    raw = tmp_path / "p.txt"
    raw.write_text(RAW)
    one = py_spy_profile(raw)
    text = profile.report({"ingest (python 1)": one, "spark (jvm 2)": one},
                          {"ingest": 0.3, "spark": 0.9})  # fmt: skip
    assert text.index("spark (jvm 2): 25 samples, its component 0.90 cores") < text.index(
        "ingest (python 1)"
    )


def _await_output(proc: subprocess.Popen[str], want: str) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until the process has printed its first line
    assert want in line, f"expected {want!r}, got {line!r}"


@pytest.mark.skipif(shutil.which("jcmd") is None, reason="needs a JDK (make test has one)")
def test_recorders_attach_to_a_python_process_and_a_jvm(tmp_path: Path) -> None:
    profile.tool("py-spy")  # a dev dependency: its absence is a failure, not a skip
    (tmp_path / "busy.py").write_text(BUSY_PY)
    (tmp_path / "Busy.java").write_text(BUSY_JAVA)
    py = subprocess.Popen([sys.executable, str(tmp_path / "busy.py")], stdout=subprocess.PIPE,
                          text=True)  # fmt: skip
    jvm = subprocess.Popen(["java", "-XX:+UsePerfData", str(tmp_path / "Busy.java")],
                           stdout=subprocess.PIPE, text=True, cwd=tmp_path)  # fmt: skip
    try:
        _await_output(py, "spinning")
        _await_output(jvm, "spinning")
        recordings = profile.start({"pyside": py.pid, "jvmside": jvm.pid}, tmp_path / "out")
        assert {(r.name, r.kind) for r in recordings} == {("pyside", "python"), ("jvmside", "jvm")}
        # until both have spun 2 s of CPU under the samplers (py-spy writes only when
        # stopped, so the CPU is what is waited on, not a fixed sleep)
        start = {p.pid: cpu_seconds({"p": p.pid})["p"] for p in (py, jvm)}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and any(
            cpu_seconds({"p": pid})["p"] < at + 2.0 for pid, at in start.items()
        ):
            time.sleep(0.2)
        got = profile.finish(recordings)
    finally:
        for proc in (py, jvm):
            proc.kill()
            proc.wait(timeout=30)
    python = got[f"pyside (python {py.pid})"]
    java = got[f"jvmside (jvm {jvm.pid})"]
    assert python.samples > 0 and python.own.most_common(1)[0][0].startswith("spin (busy.py")
    assert java.samples > 0 and java.own.most_common(1)[0][0] in {"Busy.spin", "Busy.main"}
