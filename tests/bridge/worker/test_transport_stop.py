"""A consumer that cannot close cannot hold a stopping worker: `transport.finish_within`.

(The race it bounds, a group join in flight while the worker stops, is timing-bound;
`tests/bridge/cli/test_cli_logging.py` stops real workers right after they start.)
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from bridge.worker.transport import finish_within


async def _never() -> None:
    await asyncio.Event().wait()


def test_a_step_that_finishes_in_time_is_awaited_to_its_end() -> None:
    done: list[str] = []

    async def close() -> None:
        await asyncio.sleep(0.01)
        done.append("closed")

    assert asyncio.run(finish_within(close(), 5.0, "closing")) is True
    assert done == ["closed"]


def test_a_step_that_fails_raises_its_error() -> None:
    async def boom() -> None:
        raise RuntimeError("close failed")

    with pytest.raises(RuntimeError, match="close failed"):
        asyncio.run(finish_within(boom(), 5.0, "closing"))


def test_a_step_that_hangs_is_given_up_after_its_time_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> tuple[bool, float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        finished = await finish_within(_never(), 0.2, "closing the group consumer")
        return finished, loop.time() - start

    with caplog.at_level(logging.WARNING, logger="bridge.worker.transport"):
        finished, waited = asyncio.run(main())
    assert finished is False
    assert 0.2 <= waited < 5  # not mode's 60 s
    assert "closing the group consumer did not finish within 0.2 s" in caplog.text


def test_a_step_cancelled_from_inside_is_given_up_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """aiokafka's ``fetcher.close()`` awaits a fetch it cancelled while that fetch slept
    after a lost connection, and re-raises its CancelledError from ``consumer.stop()``."""

    async def stop() -> None:
        fetch = asyncio.ensure_future(asyncio.sleep(10))
        await asyncio.sleep(0)
        fetch.cancel()
        await fetch

    with caplog.at_level(logging.WARNING, logger="bridge.worker.transport"):
        assert asyncio.run(finish_within(stop(), 5.0, "closing the group consumer")) is False
    assert "closing the group consumer was cancelled from inside" in caplog.text


def test_cancelling_the_waiter_still_cancels_it() -> None:
    async def main() -> None:
        waiter = asyncio.ensure_future(finish_within(_never(), 30.0, "closing"))
        await asyncio.sleep(0.01)
        waiter.cancel()
        await waiter

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())


def test_faust_livelock_check_is_off_for_partitions_paused_on_purpose(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Faust's check would log an ERROR per partition every few seconds once a worker has
    run 5 minutes (no fetch request since start: the partitions are paused on purpose, the
    bulk fetcher reads them). Faust's own method needs a live consumer; ours needs none."""
    from faust.types import TP

    from bridge.worker.transport import DtsConsumerThread

    thread = object.__new__(DtsConsumerThread)  # no consumer, started long ago
    thread.time_started = 0.0  # type: ignore[attr-defined]
    with caplog.at_level(logging.DEBUG):
        assert thread.verify_event_path(10_000.0, TP("dts.db.t", 0)) is None
    assert not caplog.records
