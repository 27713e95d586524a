"""The stitched sides' readers, kept out of the project's environment: delta-rs (PyPI's
``deltalake``) for Delta, pypaimon-rust (Apache Paimon's Rust core) for Paimon. Each is
installed with its own dependencies into the jar cache and put on its probe process's
path only. Both read into pyarrow, which is the project's. delta-rs reads Delta tables
with deletion vectors, which the stitched tables have; pypaimon-rust merges a Paimon
primary-key table's sorted runs as Paimon's own readers do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from logstore.localhost import cache_dir


@dataclass(frozen=True)
class ReaderApart:
    """A reader installed apart: ``packages`` (pinned, each one's dependencies listed
    too) with pip into a directory of the cache named ``name``."""

    name: str
    packages: tuple[str, ...]

    @property
    def where(self) -> Path:
        return cache_dir() / self.name

    def ensure(self) -> Path:
        """The directory holding the packages, installed on first use."""
        where = self.where
        if (where / ".complete").is_file():
            return where
        print(f"installing {', '.join(self.packages)} into {where} ...", flush=True)
        partial = where.with_name(where.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                               "--target", str(partial), *self.packages])  # fmt: skip
        shutil.rmtree(where, ignore_errors=True)
        partial.rename(where)
        (where / ".complete").touch()
        return where

    def env(self) -> dict[str, str]:
        """The environment of a process that imports the packages."""
        path = [str(self.where), *filter(None, [os.environ.get("PYTHONPATH")])]
        return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


#: deltalake and what it requires (pyarrow, which it reads into, is the project's)
DELTA_RS = ReaderApart(
    "delta-rs-1.6.6", ("deltalake==1.6.6", "arro3-core==0.9.1", "deprecation==2.1.0")
)
#: pypaimon-rust declares no requirement: it hands out pyarrow record batches
PAIMON_RS = ReaderApart("paimon-rust-0.4.0", ("pypaimon-rust==0.4.0",))
