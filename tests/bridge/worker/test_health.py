"""TableHealth: per-stage failures, growing backoff, retries that keep their count."""

from __future__ import annotations

import time

from bridge.worker.state.status import TableHealth


def test_failures_back_off_and_retries_keep_their_count() -> None:
    h = TableHealth(max_backoff_s=1.0)
    assert h.healthy and not h.blocked("data")
    assert h.failed("data", OSError(30, "Read-only file system")) == 0.25
    assert not h.healthy and h.blocked("data") and not h.due("data")
    h.failing["data"].retry_at = time.monotonic() - 0.01  # the backoff has passed
    assert h.due("data")
    h.retrying("data")
    assert not h.blocked("data") and not h.due("data")  # a retry is under way
    assert h.failed("data", OSError(30, "Read-only file system")) == 0.5  # count kept
    assert h.failed("data", OSError(28, "No space left")) == 1.0
    assert h.failed("data", OSError(28, "No space left")) == 1.0  # capped
    assert h.errors_total == 4 and "No space left" in (h.last_error or "")


def test_stages_fail_and_recover_independently() -> None:
    h = TableHealth()
    h.failed("data", RuntimeError("boom"))
    h.failed("commit", RuntimeError("bang"))
    assert h.succeeded("commit") is True
    assert not h.healthy  # data still failing
    assert h.succeeded("commit") is False  # was not failing any more
    assert h.succeeded("data") is True and h.healthy
    j = h.to_json()
    assert j["healthy"] is True and j["errors_total"] == 2 and j["failing"] == {}
