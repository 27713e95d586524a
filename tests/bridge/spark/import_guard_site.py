"""Installed by tests/bridge/spark/import_guard.py as ``dts_import_guard`` in a test interpreter, and
imported by a ``.pth`` line when that interpreter starts: before any other import of every
Python process started with it (a script, Spark's daemon and workers, its planners).

The interpreter's site-packages hold only the allowed distributions, so the others are
absent as on a machine that installed just those. This module makes a refusal legible:
an ``import`` of a module that one of the absent-but-installed-elsewhere distributions
provides raises an error naming the importer and the distribution, and is recorded in
the log directory the JSON beside it names, with every process it guards. A probe
(``importlib.util.find_spec``, as polars does for its optional libraries) is not an
import: it gets the plain answer, "absent". Standard library only.
"""

from __future__ import annotations

import importlib.abc
import json
import os
import sys
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

_CONFIG = json.loads(Path(__file__).with_name("dts_import_guard.json").read_text())
_BLOCKED: dict[str, list[str]] = _CONFIG["blocked"]  # import name -> distributions
_LOGS = Path(_CONFIG["logs"])


def _append(name: str, line: str) -> None:
    # one short write per line in append mode: lines of concurrent processes do not interleave
    with open(_LOGS / name, "a") as f:
        f.write(line + "\n")


def _importing(fullname: str) -> tuple[bool, str]:
    """(whether an import statement asked, not a probe; the module that asked).

    The asker is the first, going outward, of: a Python frame outside importlib (its
    module), or the import of another module under way (a compiled module importing while
    it initializes has no Python frame of its own: pyarrow._compute's optional imports),
    not counting ``fullname``'s own submodules (``import a.b`` imports ``a`` first)."""
    frame: FrameType | None = sys._getframe(2)
    importing = False
    while frame is not None:
        if frame.f_code.co_name == "_find_and_load":  # importlib's path of every import
            loading = str(frame.f_locals.get("name", "?"))
            if importing and loading != fullname and not loading.startswith(f"{fullname}."):
                return True, loading
            importing = True
        name = str(frame.f_globals.get("__name__", "?"))
        if not name.startswith(("importlib", "_frozen_importlib")) and name != __name__:
            return importing, name
        frame = frame.f_back
    return importing, "?"


class UndeclaredImport(ModuleNotFoundError):
    """An import of a distribution the extras under test do not declare."""


class Guard(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: ModuleType | None = None) -> None:
        dists = _BLOCKED.get(fullname.partition(".")[0])
        if dists is None:
            return None  # the other finders decide
        importing, importer = _importing(fullname)
        if not importing:
            return None  # a probe: the other finders answer that it is absent
        _append("refused.txt", f"{os.getpid()}\t{fullname}\t{importer}\t{','.join(dists)}")
        raise UndeclaredImport(
            f"import guard: {importer} imports {fullname}, from {', '.join(dists)}, "
            f"which {_CONFIG['extras']} do not declare",
            name=fullname,
        )


sys.meta_path.insert(0, Guard())
_append("processes.txt", f"{os.getpid()}\t{' '.join(sys.orig_argv)}")
