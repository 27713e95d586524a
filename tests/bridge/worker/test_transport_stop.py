"""A rebalance callback cannot hold a stopping worker: `transport.unless_stopping`.

(The race it closes, a group join completing while the worker stops, is timing-bound;
`tests/bridge/cli/test_cli_logging.py` stops real workers right after they start.)
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from bridge.worker.transport import unless_stopping


async def _never() -> None:
    await asyncio.Event().wait()


async def _after(s: float, done: list[str]) -> None:
    await asyncio.sleep(s)
    done.append("callback")


def test_a_callback_runs_to_its_end_while_the_worker_runs() -> None:
    async def main() -> list[str]:
        done: list[str] = []
        await unless_stopping(_after(0.01, done), asyncio.Event().wait(), 5.0, "p")
        return done

    assert asyncio.run(main()) == ["callback"]


def test_a_callback_that_fails_raises_its_error() -> None:
    async def boom() -> None:
        raise RuntimeError("assignment failed")

    with pytest.raises(RuntimeError, match="assignment failed"):
        asyncio.run(unless_stopping(boom(), asyncio.Event().wait(), 5.0, "p"))


def test_once_stopping_a_callback_gets_its_grace_then_is_given_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> tuple[list[str], float]:
        stopping = asyncio.Event()
        stopping.set()
        done: list[str] = []
        # finishes within the grace: it completes (a normal stop's revocation)
        await unless_stopping(_after(0.01, done), stopping.wait(), 5.0, "p")
        # never finishes: given up after the grace, not after mode's 60 s
        loop = asyncio.get_running_loop()
        start = loop.time()
        await unless_stopping(_never(), stopping.wait(), 0.2, "partitions [TP(t, 0)]")
        return done, loop.time() - start

    with caplog.at_level(logging.WARNING, logger="bridge.worker.transport"):
        done, waited = asyncio.run(main())
    assert done == ["callback"]
    assert 0.2 <= waited < 5
    assert "gave up waiting 0.2 s for the worker to take partitions [TP(t, 0)]" in caplog.text
