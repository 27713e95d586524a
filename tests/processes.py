"""Finding processes a test started, by a marker in the environment they inherit."""

from __future__ import annotations

import os
from pathlib import Path


def marked_processes(needle: bytes) -> list[str]:
    """Live processes (other than ours, zombies aside) whose environment holds ``needle``,
    as ``"<pid>: <command line>"``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes():
                continue
            stat = (entry / "stat").read_text()
            if stat[stat.rindex(")") + 2] == "Z":  # exited, not yet reaped
                continue
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry.name}: {cmd[:200]}")
        except OSError:  # exited meanwhile, or not ours to read
            continue
    return found
