"""What a process tree uses, from /proc: resident memory, CPU seconds, threads, open files.

A named process is measured with its descendants (``bench.pipeline.probe.process_trees``):
the Spark JVM's Python workers are its children, and a leak in them is the pipeline's too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from bench.pipeline.probe import process_trees

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Usage:
    rss_bytes: int
    cpu_s: float  # utime + stime
    threads: int
    open_files: int
    processes: int = 1

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.rss_bytes + other.rss_bytes,
            self.cpu_s + other.cpu_s,
            self.threads + other.threads,
            self.open_files + other.open_files,
            self.processes + other.processes,
        )


NONE = Usage(0, 0.0, 0, 0, 0)


def open_files(pid: int) -> int:
    """Entries of /proc/PID/fd (files, sockets, pipes): 0 when gone or not ours to read."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def read_usage(pid: int) -> Usage | None:
    """One process's usage, None once it has gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # fields after the command name, which may hold spaces and parentheses: proc(5)'s
    # field N is fields[N - 3]
    fields = text[text.rindex(")") + 2 :].split()
    cpu = (int(fields[11]) + int(fields[12])) / _TICK
    return Usage(int(fields[21]) * _PAGE, cpu, int(fields[17]), open_files(pid))


def tree_usage(roots: dict[str, int]) -> dict[str, Usage]:
    """Per name, the usage of the process and its descendants (NONE when it has gone)."""
    out = {}
    for name, pids in process_trees(roots).items():
        total = NONE
        for pid in pids:
            if (usage := read_usage(pid)) is not None:
                total = total + usage
        out[name] = total
    return out
