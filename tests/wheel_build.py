"""The project's wheel, built the way a release builds it (pip and setuptools' backend).

It is built from a copy of what the build reads, so the checkout stays clean (setuptools
writes build/ and *.egg-info beside the sources), and without build isolation or an
index: the dev extra installs the backend, so no network is needed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.module_imports import PACKAGES, ROOT

BUILD_INPUTS = ("pyproject.toml", "README.md")  # the readme is the long description


def build_wheel(work: Path) -> Path:
    src = work / "src"
    src.mkdir(parents=True)
    for name in BUILD_INPUTS:
        shutil.copy2(ROOT / name, src / name)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    out = work / "dist"
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    proc = subprocess.run(
        [*cmd, "--quiet", "--wheel-dir", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout}\n{proc.stderr}"
    (wheel,) = out.glob("*.whl")
    return wheel


def unpacked(wheel: Path, where: Path) -> Path:
    """The wheel's contents as an installer lays them out (a pure wheel: one directory)."""
    with zipfile.ZipFile(wheel) as z:
        z.extractall(where)
    return where
