"""delta-rs (PyPI's ``deltalake``), the stitched side's reader, kept out of the project's
environment: installed with its own dependencies into the jar cache and put on the probe
process's path only. It reads Delta tables with deletion vectors, which the stitched
tables have."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from logstore.localhost import cache_dir

DELTALAKE_VERSION = "1.6.6"
#: deltalake and what it requires (pyarrow, which it reads into, is the project's)
PACKAGES = (f"deltalake=={DELTALAKE_VERSION}", "arro3-core==0.9.1", "deprecation==2.1.0")


def delta_rs_dir() -> Path:
    return cache_dir() / f"delta-rs-{DELTALAKE_VERSION}"


def ensure_delta_rs() -> Path:
    """The directory holding deltalake, installed on first use."""
    where = delta_rs_dir()
    if (where / ".complete").is_file():
        return where
    print(f"installing {', '.join(PACKAGES)} into {where} ...", flush=True)
    partial = where.with_name(where.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                           "--target", str(partial), *PACKAGES])  # fmt: skip
    shutil.rmtree(where, ignore_errors=True)
    partial.rename(where)
    (where / ".complete").touch()
    return where


def probe_env() -> dict[str, str]:
    """The environment of a process that imports deltalake."""
    path = [str(delta_rs_dir()), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
