"""The long-running commands freeze what start-up built, so the collector's full walks
skip it; garbage of start-up is freed first, not frozen. Every dts process's Arrow memory
comes from jemalloc unless the user chose a pool."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

from bridge.commands.heap import ARROW_POOL_ENV, freeze_start_up_objects


class _Node:
    me: object


def test_start_up_objects_are_frozen_and_start_up_garbage_is_freed() -> None:
    gc.unfreeze()
    garbage = _Node()
    garbage.me = garbage  # a cycle: only the collector frees it
    gone = weakref.ref(garbage)
    del garbage
    kept = _Node()
    kept.me = kept
    try:
        freeze_start_up_objects()
        assert gone() is None
        assert gc.get_freeze_count() > 0
        assert not any(o is kept for o in gc.get_objects())  # out of every walk
    finally:
        gc.unfreeze()
    assert any(o is kept for o in gc.get_objects())


@pytest.mark.parametrize(("chosen", "pool"), [(None, "jemalloc"), ("system", "system")])
def test_arrow_allocates_from_jemalloc_unless_the_user_chose_a_pool(
    chosen: str | None, pool: str, tmp_path: Path
) -> None:
    # a process of its own: Arrow reads the pool once a process, and this one's is pytest's
    env = {k: v for k, v in os.environ.items() if k != ARROW_POOL_ENV}
    if chosen is not None:
        env[ARROW_POOL_ENV] = chosen
    script = (
        "import os, sys\n"
        "from bridge.commands.heap import return_freed_arrow_memory\n"
        "return_freed_arrow_memory(os.environ)\n"
        "import pyarrow as pa, pyarrow.parquet as pq\n"
        "pq.write_table(pa.table({'a': list(range(100_000))}), sys.argv[1])\n"
        "print(pa.default_memory_pool().backend_name, pa.mimalloc_memory_pool().max_memory())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "a.parquet")],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    # Parquet's writer allocates from Arrow's C++ default too: nothing of it in mimalloc
    assert out.stdout.split() == [pool, "0"]
