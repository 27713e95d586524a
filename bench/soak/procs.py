"""What a process tree uses, from /proc: resident memory, CPU seconds, threads (and their
names), open files.

A named process is measured with its descendants (``bench.pipeline.probe.process_trees``):
the Spark JVM's Python workers are its children, and a leak in them is the pipeline's too.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
#: a thread name's numbers, folded so that a pool's threads share one name
_NUMBERS = re.compile(r"\d+")


@dataclass(frozen=True)
class Usage:
    rss_bytes: int
    cpu_s: float  # utime + stime
    open_files: int
    processes: int = 1
    # threads by name, from the same listing as their count: a JVM starts and ends threads
    # all the time, and a count read a moment apart from the names does not add up
    thread_names: Counter[str] = field(default_factory=Counter)

    @property
    def threads(self) -> int:
        return sum(self.thread_names.values())

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.rss_bytes + other.rss_bytes,
            self.cpu_s + other.cpu_s,
            self.open_files + other.open_files,
            self.processes + other.processes,
            self.thread_names + other.thread_names,
        )


NONE = Usage(0, 0.0, 0, 0)


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
    if not (names := thread_names(pid)):
        return None  # it ended after its stat was read
    return Usage(int(fields[21]) * _PAGE, cpu, open_files(pid), thread_names=names)


def tree_usage(trees: Mapping[str, Iterable[int]]) -> dict[str, Usage]:
    """Per name, the usage of the process and its descendants (``process_trees``'s pids;
    NONE when it has gone)."""
    out = {}
    for name, pids in trees.items():
        total = NONE
        for pid in pids:
            if (usage := read_usage(pid)) is not None:
                total = total + usage
        out[name] = total
    return out


def thread_names(pid: int) -> Counter[str]:
    """A process's threads by name (its /proc/PID/task/*/comm, numbers folded to ``#``:
    ``tokio-rt-worker``, ``pool-#-thread-#``): which pool a change in its count is in.
    Empty once it has gone."""
    out: Counter[str] = Counter()
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        except OSError:  # the thread ended between the listing and the read
            continue
        out[_NUMBERS.sub("#", name)] += 1
    return out


def changed_thread_names(
    first: dict[str, dict[str, int]], last: dict[str, dict[str, int]]
) -> dict[str, dict[str, tuple[int, int]]]:
    """Per process, the thread names whose count differs between two samples: the pool a
    thread series' growth (or fall) is in."""
    out = {}
    for proc in sorted(first.keys() & last.keys()):
        a, b = first[proc], last[proc]
        moved = {n: (a.get(n, 0), b.get(n, 0)) for n in sorted(a.keys() | b.keys())}
        if changed := {n: ab for n, ab in moved.items() if ab[0] != ab[1]}:
            out[proc] = changed
    return out
