"""The long-running commands freeze what start-up built, so the collector's full walks
skip it; garbage of start-up is freed first, not frozen. The worker's Arrow memory comes
from jemalloc unless the user chose a pool."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref

import pytest

from bridge.commands.heap import freeze_start_up_objects


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
    chosen: str | None, pool: str
) -> None:
    # a process of its own: the pool is chosen once a process, and this one's is pytest's
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if chosen is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = chosen
    script = (
        "import pyarrow as pa\n"
        "from bridge.commands.heap import return_freed_arrow_memory\n"
        "return_freed_arrow_memory()\n"
        "print(pa.default_memory_pool().backend_name)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == pool
