"""The rate search: each pipeline's highest sustained rate within a precision, found by
measuring steps (``measure(rate)``, warm-up excluded) rather than climbing a fixed ladder.

From the first rate it doubles while steps keep up (halves while they do not, down to a
floor), then bisects (geometric midpoints) between the highest rate kept and the lowest
not kept until they are within ``precision`` of each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench.pipeline.report import StepFigures, highest_kept, lowest_failed


@dataclass(frozen=True)
class Bounds:
    first: int
    floor: int
    ceiling: int
    precision: float = 0.10
    max_steps: int = 16


def next_rate(kept: int, failed: int | None, last: int, bounds: Bounds) -> int | None:
    """The next rate to measure, or None when the search is done. ``kept`` is the highest
    rate kept up so far (0: none), ``failed`` the lowest not kept (None: none)."""
    if failed is None:  # every step kept up: climb
        return None if last >= bounds.ceiling else min(last * 2, bounds.ceiling)
    if not kept:  # every step fell behind: descend
        return None if last <= bounds.floor else max(last // 2, bounds.floor)
    if failed <= kept * (1 + bounds.precision):
        return None
    mid = round((kept * failed) ** 0.5)
    return mid if kept < mid < failed else None


def search(measure: Callable[[int], StepFigures], bounds: Bounds) -> list[StepFigures]:
    steps: list[StepFigures] = []
    rate: int | None = bounds.first
    while rate is not None and len(steps) < bounds.max_steps:
        steps.append(measure(rate))
        rate = next_rate(highest_kept(steps), lowest_failed(steps), rate, bounds)
    return steps
