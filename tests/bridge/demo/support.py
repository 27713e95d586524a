"""Load a page in headless Chromium (Debian's ``chromium``): its DOM after scripts ran and
what it wrote on the console."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install chromium)"
)
_CONSOLE = re.compile(r":CONSOLE:\d+\] (?P<message>.*)$")


@dataclass
class LoadedPage:
    dom: str
    console: list[str]

    def count(self, css_class: str) -> int:
        """Elements whose class attribute starts with ``css_class``."""
        return len(re.findall(rf'class="{re.escape(css_class)}[" ]', self.dom))


def load(path: Path, timeout_s: float = 120) -> LoadedPage:
    assert CHROMIUM is not None
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
         "--v=0", "--dump-dom", path.resolve().as_uri()],
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [m["message"] for line in proc.stderr.splitlines() if (m := _CONSOLE.search(line))]
    return LoadedPage(proc.stdout, console)
