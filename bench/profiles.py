"""Samplers' output summed as the functions holding most samples: py-spy's raw (collapsed)
stacks and Java Flight Recorder's execution samples, each read the same way (self time by
function, and samples by thread) so a Python hop and a JVM hop are compared alike."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: py-spy --threads puts the thread first, ``thread (15700): spinner``, under
#: ``process 12:"cmd"`` with --subprocesses
_THREAD = re.compile(r"^thread \((?:0x)?[0-9A-Fa-f]+\)(?:: (?P<name>.*))?$")


@dataclass
class Profile:
    """Samples of one process, by the function running (self) and by thread."""

    samples: int = 0
    own: Counter[str] = field(default_factory=Counter)
    threads: Counter[str] = field(default_factory=Counter)

    def lines(self, top: int = 12) -> list[str]:
        """The functions holding most samples, then the busiest threads, as shares."""
        if not self.samples:
            return ["(no samples: the process was idle or the sampler could not attach)"]
        out = [f"{n / self.samples:6.1%}  {name}" for name, n in self.own.most_common(top)]
        busiest = self.threads.most_common(5)
        if len(busiest) > 1:
            out.append("  by thread: " + ", ".join(
                f"{name} {n / self.samples:.0%}" for name, n in busiest))  # fmt: skip
        return out


def py_spy_profile(path: Path) -> Profile:
    """py-spy ``record --format raw`` (one ``frame;frame;... count`` line per stack)."""
    got = Profile()
    for line in path.read_text().splitlines() if path.exists() else []:
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        n = int(count)
        thread = "(threads not recorded)"
        while frames and (frames[0].startswith("process ") or _THREAD.match(frames[0])):
            if m := _THREAD.match(frames.pop(0)):
                thread = _thread_family(m["name"] or "(unnamed)")
        got.samples += n
        got.own[frames[-1] if frames else "(no stack)"] += n
        got.threads[thread] += n
    return got


def summarize_profile(path: Path, top: int = 15) -> list[str]:
    """py-spy raw output as the functions holding most samples (self time)."""
    if not path.exists():
        return ["(no profile: is py-spy installed?)"]
    return py_spy_profile(path).lines(top)


def jfr_profile(path: Path, jfr: str = "jfr") -> Profile:
    """A Flight Recorder file's ``jdk.ExecutionSample`` events (Java threads running Java
    code; threads waiting in native calls are not sampled), top frames only."""
    got = Profile()
    if not path.exists():
        return got
    printed = subprocess.run(
        [jfr, "print", "--json", "--stack-depth", "1", "--events", "jdk.ExecutionSample",
         str(path)],
        capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    for event in json.loads(printed.stdout)["recording"]["events"]:
        values: dict[str, Any] = event["values"]
        frames = (values.get("stackTrace") or {}).get("frames") or []
        if frames:
            method = frames[0]["method"]
            got.own[f"{method['type']['name']}.{method['name']}"] += 1
        else:
            got.own["(no stack)"] += 1
        thread = values.get("sampledThread") or {}
        got.threads[_thread_family(thread.get("javaName") or thread.get("osName") or "?")] += 1
        got.samples += 1
    return got


def _thread_family(name: str) -> str:
    """A thread's name without its numbers and ids: Spark's task threads (``... for task
    3.0 in stage 12.0 (TID 48)``) count as one family, as do a query's stream threads
    (``... [id = <uuid>, runId = <uuid>]``) across restarts."""
    bare = re.sub(r"\s*\[id = [^\]]*\]|\s*\(TID \d+\)", "", name)
    bare = re.sub(r"(?<![\d.])[-\s#]*\d+$", "", bare)  # "worker-2", not "stage 12.0"
    return re.sub(r"\d+(?:\.\d+)?", "N", bare) or name
