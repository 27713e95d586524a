"""What both sides share while they run: the readers (how fresh each table is; the three
tables "together", checked against the oracle; each side says how it reads) and
per-process CPU time from /proc.

Samples are JSON lines, appended and flushed one by one, so the driver follows them live
(to see when a pipeline stops keeping up) and a killed side leaves what it measured.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.pipeline.model import TABLES, inconsistencies, latest_events

#: the latest source change (event ms) each table shows, read at its latest
Fresh = Callable[[], dict[str, int | None]]
#: the three tables read "together", and anything worth keeping (e.g. the barrier read)
Together = Callable[[], tuple[dict[str, pa.Table], dict[str, Any]]]


class Sampler:
    """Two reader threads, one JSON line per read in ``path``: every ``interval_s`` the
    freshness of each table (a small read), and as often as it completes, the three
    tables together checked against the oracle (a full read, slower under load)."""

    def __init__(
        self, fresh: Fresh, together: Together, path: Path, interval_s: float = 1.0
    ) -> None:
        self._fresh = fresh
        self._together = together
        self.path = path
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(f,), name=f"bench-probe-{n}", daemon=True)
            for n, f in (("fresh", self._sample_fresh), ("together", self._sample_together))
        ]

    def start(self) -> Sampler:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)

    def _run(self, sample: Callable[[float], dict[str, Any]]) -> None:
        while not self._stop.is_set():
            started = time.time()
            line = json.dumps(sample(started)) + "\n"
            with self._lock, self.path.open("a") as out:
                out.write(line)
            self._stop.wait(max(0.0, self.interval_s - (time.time() - started)))

    def _sample_fresh(self, started: float) -> dict[str, Any]:
        try:
            latest = self._fresh()
        except Exception as exc:  # a read that fails is a sample too
            return {"t": started, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        out: dict[str, Any] = {"t": started, "fresh_s": time.time() - started}
        if all(v is not None for v in latest.values()):
            out["latest"] = latest
        return out

    def _sample_together(self, started: float) -> dict[str, Any]:
        try:  # the read and its check: an error in either is a sample, never a dead thread
            data, extra = self._together()
            out: dict[str, Any] = {"t": started, "read_s": time.time() - started, **extra}
            if all(data[t].num_rows for t in TABLES):
                out["wrong"] = inconsistencies(data)
                out["latest_together"] = latest_events(data)
        except Exception as exc:
            return {"t": started, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        return out


def read_samples(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            continue
    return out


# ---- CPU ---------------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a live process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK


def parent_pid(pid: int) -> int:
    """The parent of a live process (0 when it is gone)."""
    stat = _stat(pid)
    return stat[0] if stat is not None else 0


def _all_stats() -> dict[int, tuple[int, float]]:
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (s := _stat(int(entry))) is not None:
            stats[int(entry)] = s
    return stats


def _trees(roots: dict[str, int], stats: dict[int, tuple[int, float]]) -> dict[str, list[int]]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    named = set(roots.values())
    out = {}
    for name, root in roots.items():
        pids, todo = [], [root]
        while todo:
            pid = todo.pop()
            if pid in stats:
                pids.append(pid)
                todo.extend(c for c in children.get(pid, []) if c not in named)
        out[name] = pids
    return out


def process_trees(roots: dict[str, int]) -> dict[str, list[int]]:
    """The live PIDs of each named process and its descendants (Spark's Python workers are
    the JVM's children), a named process's subtree listed under its own name."""
    return _trees(roots, _all_stats())


def cpu_seconds(roots: dict[str, int]) -> dict[str, float]:
    """CPU seconds used so far by each named process and its descendants (``process_trees``)."""
    stats = _all_stats()
    return {name: sum(stats[p][1] for p in pids) for name, pids in _trees(roots, stats).items()}
