"""Rebalance callbacks posted from Faust's loop, applied by one thread: revocations in
order, only the newest of several waiting assignments, and never blocking the poster."""

from __future__ import annotations

import threading
import time
from collections.abc import Set

from faust.types import TP

from bridge.worker.ownership import OwnershipQueue


class SlowOwner:
    """Blocks in its first call until released, as a table's data lock held by a long
    batch would."""

    def __init__(self) -> None:
        self.applied: list[tuple[str, frozenset[TP], int | None]] = []
        self.release = threading.Event()
        self.entered = threading.Event()

    def on_assigned(self, assigned: Set[TP], generation: int) -> None:
        self.entered.set()
        assert self.release.wait(10)
        self.applied.append(("assigned", frozenset(assigned), generation))

    def on_revoked(self, revoked: Set[TP]) -> None:
        self.applied.append(("revoked", frozenset(revoked), None))


def test_revocations_in_order_only_the_newest_assignment_and_posting_never_blocks() -> None:
    owner = SlowOwner()
    queue = OwnershipQueue(owner)
    queue.start()
    a, b, c = {TP("t", 0), TP("t", 1)}, {TP("t", 1)}, {TP("t", 0)}
    try:
        queue.assigned(a, 1)
        assert owner.entered.wait(10)  # applying a, stuck on the "data lock"
        started = time.monotonic()
        queue.revoked(a)
        queue.assigned(set(), 2)  # a stale seek during the rebalance...
        queue.assigned(b, 2)  # ...superseded by the real one
        queue.revoked(b)
        queue.assigned(c, 3)
        assert time.monotonic() - started < 1.0  # Faust's loop never waited
        assert queue.superseded()
        owner.release.set()
        assert queue.wait_idle(10)
    finally:
        queue.stop()
    assert owner.applied == [
        ("assigned", frozenset(a), 1),
        ("revoked", frozenset(a), None),
        ("revoked", frozenset(b), None),
        ("assigned", frozenset(c), 3),
    ]
    assert not queue.superseded()
