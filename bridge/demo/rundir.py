"""Where a demo run keeps what it made: ``<root>/run-<UTC time>/`` (warehouse, logs, Spark
scratch and checkpoints, report.html), left for exploring after the run.

The root (``--dir``, ``$DTS_DEMO_DIR``, default ``./dts-demo``) carries a marker file, so
``dts demo --clean`` removes only a directory the demo made.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

from bridge.demo.errors import RunDirError

ROOT_ENV = "DTS_DEMO_DIR"
DEFAULT_ROOT = "dts-demo"
MARKER = ".dts-demo"


def _check_ours(root: Path) -> None:
    if root.exists() and not (root / MARKER).is_file():
        if root.is_dir() and not any(root.iterdir()):
            return
        raise RunDirError(
            f"{root} exists and was not made by `dts demo` (no {MARKER} in it); "
            "pass another --dir (or DTS_DEMO_DIR)"
        )


def new_run_dir(root: Path) -> Path:
    """A fresh ``run-<time>`` directory under ``root`` (created, with the marker)."""
    root = root.resolve()
    _check_ours(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / MARKER).write_text("made by `dts demo`; `dts demo --clean` removes this directory\n")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    for n in range(100):
        run = root / (f"run-{stamp}" if n == 0 else f"run-{stamp}-{n}")
        try:
            run.mkdir()
        except FileExistsError:
            continue
        return run
    raise RunDirError(f"cannot make a new run directory in {root}")


def clean(root: Path) -> list[str]:
    """Remove ``root`` and every run in it; returns the runs removed (none if it is absent)."""
    root = root.resolve()
    if not root.exists():
        return []
    _check_ours(root)
    runs = sorted(p.name for p in root.glob("run-*"))
    shutil.rmtree(root)
    return runs
