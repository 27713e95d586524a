"""The long-running commands freeze what start-up built, so the collector's full walks
skip it; garbage of start-up is freed first, not frozen."""

from __future__ import annotations

import gc
import weakref

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
