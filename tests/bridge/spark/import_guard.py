"""An interpreter that has only what chosen extras of pyproject.toml declare (issue 26).

``guarded_python(where, code, extras)`` makes a virtualenv whose site-packages hold the
base's and ``extras``' distributions and what those require, recursively, per their
metadata (links to this environment's installed files), and the project's packages from
``code`` (an unpacked wheel, or the checkout): every other distribution is absent, as on
a machine that installed just those. Every Python process started with it, Spark's
workers and planners included, first imports ``import_guard_site.py``, which turns an
import of a distribution installed here but absent there into an error naming the
importer, and records it and the process.
"""

from __future__ import annotations

import json
import shutil
import sys
import venv
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from tests.dependencies import canonical, declared, installed_closure, providers
from tests.module_imports import PACKAGES

GUARD_SOURCE = Path(__file__).with_name("import_guard_site.py")


@dataclass(frozen=True)
class GuardedPython:
    python: str
    logs: Path
    allowed: set[str]  # the distributions it has
    blocked: dict[str, list[str]]  # import name -> the distributions (installed here) providing it

    def _lines(self, name: str) -> list[str]:
        path = self.logs / name
        return path.read_text().splitlines() if path.exists() else []

    def refused(self) -> list[tuple[str, str, str]]:
        """(module, importer, distributions) of every refused import, the libraries' own
        optional ones included (fastavro's cramjam, pyarrow's dateutil), which they catch
        as they would on a machine without those. A compiled module's import is put down to
        the nearest Python frame, which may be the code that called it."""
        fields = [line.split("\t") for line in self._lines("refused.txt")]
        return [(module, importer, dists) for _, module, importer, dists in fields]

    def processes(self) -> list[str]:
        """``pid<TAB>command line`` of every process the guard started in."""
        return self._lines("processes.txt")


def _link_distribution(dist: metadata.Distribution, site: Path) -> None:
    """Link the top-level entries a distribution installed into site-packages (its
    packages, modules, vendored libraries and .dist-info) into ``site``."""
    tops = {f.parts[0] for f in dist.files or [] if f.parts and f.parts[0] != ".."}
    for top in tops - {"__pycache__"}:
        source = Path(str(dist.locate_file(top)))
        target = site / top
        if source.exists() and not target.exists():
            target.symlink_to(source)


def guarded_python(where: Path, code: Path, extras: Iterable[str]) -> GuardedPython:
    extras = list(extras)
    allowed = installed_closure(declared(extras))
    blocked = {
        name: sorted(dists)
        for name, dists in sorted(providers().items())
        if not dists & allowed and name not in PACKAGES
    }
    venv.EnvBuilder(with_pip=False).create(where)
    site = next(where.glob("lib/python*/site-packages"))
    for dist in metadata.distributions(path=[p for p in sys.path if p.endswith("site-packages")]):
        if canonical(dist.metadata["Name"]) in allowed:
            _link_distribution(dist, site)
    logs = where / "import-guard"
    logs.mkdir()
    config = {"blocked": blocked, "logs": str(logs), "extras": f"base + {', '.join(extras)}"}
    (site / "dts_import_guard.json").write_text(json.dumps(config))
    shutil.copyfile(GUARD_SOURCE, site / "dts_import_guard.py")
    (site / "dts-code.pth").write_text(f"{code}\n")
    # .pth files run in name order: dts-code.pth has set sys.path by then
    (site / "zz-dts-import-guard.pth").write_text("import dts_import_guard\n")
    return GuardedPython(str(where / "bin" / "python"), logs, allowed, blocked)
