"""What inside each hop takes a pipeline's CPU during a measured step (``--profile``): every
Python process of the side sampled by py-spy, every JVM by Java Flight Recorder, summed by
``bench.profiles``. The step's CPU per component names the hop that bounds a pipeline;
this names the functions in it. Sampling takes CPU of its own: profile a step apart, never
a search whose figures are reported.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.pipeline.probe import parent_pid, process_trees
from bench.profiles import Profile, jfr_profile, py_spy_profile

#: py-spy's samples a second: enough for shares to 1%, cheap beside the step
RATE = 50
JFR_NAME = "bench-pipeline"


class ProfilerMissing(RuntimeError):
    """py-spy or the JDK's jcmd is not where the profile looks for it."""


@dataclass
class Recording:
    """One process being sampled: py-spy's own process, or a recording inside a JVM."""

    name: str
    pid: int
    kind: str  # "python" or "jvm"
    path: Path
    spy: subprocess.Popen[bytes] | None = None


def tool(name: str) -> str:
    """py-spy beside this interpreter or on PATH; jcmd and jfr from JAVA_HOME or PATH."""
    near = [Path(sys.executable).with_name(name)]
    if java_home := os.environ.get("JAVA_HOME"):
        near.append(Path(java_home) / "bin" / name)
    for path in near:
        if path.is_file():
            return str(path)
    if found := shutil.which(name):
        return found
    hint = "pip install py-spy" if name == "py-spy" else "a JDK's bin/ on PATH or JAVA_HOME"
    raise ProfilerMissing(f"--profile needs {name}: {hint}")


def kind(pid: int) -> str | None:
    """ "jvm", "python" or None (a shell, or gone), from the process's executable."""
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return None
    return "jvm" if exe == "java" else "python" if exe.startswith("python") else None


def start(roots: dict[str, int], out: Path) -> list[Recording]:
    """Sample every JVM and Python process under the named ``roots`` into ``out``.

    A Python process a JVM started (Spark's worker daemon) is sampled with the workers it
    forks later (--subprocesses); those workers are not sampled again."""
    out.mkdir(parents=True, exist_ok=True)
    spy, jcmd = tool("py-spy"), tool("jcmd")
    got: list[Recording] = []
    for name, pids in process_trees(roots).items():
        for pid in pids:
            what, up = kind(pid), parent_pid(pid)
            if what == "jvm":
                got.append(Recording(name, pid, what, out / f"{name}-{pid}.jfr"))
                subprocess.run([jcmd, str(pid), "JFR.start", f"name={JFR_NAME}",
                                "settings=profile"], capture_output=True, check=True,
                               timeout=60)  # fmt: skip
            elif what == "python" and not (kind(up) == "python" and kind(parent_pid(up)) == "jvm"):
                path = out / f"{name}-{pid}.txt"
                cmd = [spy, "record", "--pid", str(pid), "--rate", str(RATE), "--format",
                       "raw", "--threads", "--nonblocking", "--output", str(path)]  # fmt: skip
                if kind(up) == "jvm":
                    cmd.append("--subprocesses")
                got.append(Recording(name, pid, what, path, subprocess.Popen(
                    cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))  # fmt: skip
    return got


def finish(recordings: list[Recording]) -> dict[str, Profile]:
    """Stop every sampler, then each process's profile, keyed ``name (kind pid)``."""
    jcmd = tool("jcmd")
    for rec in recordings:
        if rec.spy is not None:
            with contextlib.suppress(ProcessLookupError):
                rec.spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        else:
            subprocess.run([jcmd, str(rec.pid), "JFR.stop", f"name={JFR_NAME}",
                            f"filename={rec.path}"], capture_output=True, timeout=120)  # fmt: skip
    for rec in recordings:
        if rec.spy is not None:
            try:
                rec.spy.wait(timeout=60)
            except subprocess.TimeoutExpired:
                rec.spy.kill()
    jfr = tool("jfr")
    return {
        f"{rec.name} ({rec.kind} {rec.pid})": (
            jfr_profile(rec.path, jfr) if rec.kind == "jvm" else py_spy_profile(rec.path)
        )
        for rec in recordings
    }


def report(profiles: dict[str, Profile], cpu: dict[str, float], top: int = 12) -> str:
    """Each process's profile, busiest component first (``cpu``: cores by component)."""
    order = sorted(profiles, key=lambda key: -cpu.get(key.split(" (")[0], 0.0))
    lines: list[str] = []
    for key in order:
        profile = profiles[key]
        share = cpu.get(key.split(" (")[0])
        used = f", its component {share:.2f} cores" if share is not None else ""
        lines.append(f"{key}: {profile.samples:,} samples{used}")
        lines.extend(f"  {line}" for line in profile.lines(top))
    return "\n".join(lines) + "\n"
