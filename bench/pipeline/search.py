"""The rate search: each pipeline's highest sustained rate within a precision, found by
measuring steps (``measure(rate)``, warm-up excluded) rather than climbing a fixed ladder.

From the first rate it doubles while steps keep up (halves while they do not, down to a
floor), then bisects (geometric midpoints) between the highest rate kept and the lowest
not kept until they are within ``precision`` of each other.

A sweep over several settings (the stitched stacks' triggers) searches each one coarsely
(doubling only: ``coarse``), then bisects only the best, from the steps its coarse search
left (``search(..., prior=...)``): the triggers' ranking costs two or three steps each, not
six.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

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


def first_rate(bounds: Bounds, prior: list[StepFigures] | None = None) -> int | None:
    """Where a search starts: its first rate, or where ``prior`` steps leave it (None: they
    already settle it)."""
    if not prior:
        return bounds.first
    return next_rate(highest_kept(prior), lowest_failed(prior), prior[-1].rate, bounds)


def search(
    measure: Callable[[int], StepFigures], bounds: Bounds, prior: list[StepFigures] | None = None
) -> list[StepFigures]:
    """The steps measured (``prior`` ones, measured before, steer it but are not returned)."""
    prior = prior or []
    steps: list[StepFigures] = []
    rate = first_rate(bounds, prior)
    while rate is not None and len(prior) + len(steps) < bounds.max_steps:
        steps.append(measure(rate))
        seen = [*prior, *steps]
        rate = next_rate(highest_kept(seen), lowest_failed(seen), rate, bounds)
    return steps


def coarse(bounds: Bounds, best_so_far: int) -> Bounds:
    """A sweep's search of one setting: doubling (or halving) only, starting at the best
    rate another setting kept (a slower setting falls behind there at once)."""
    return replace(bounds, first=max(bounds.first, best_so_far), precision=1.0)


def best_setting(steps: dict[str, list[StepFigures]]) -> str:
    """The setting that kept up at the highest rate; between equals, the one whose
    slowest table was freshest (p99) at that rate."""

    def rank(name: str) -> tuple[int, float]:
        kept = highest_kept(steps[name])
        at = [s for s in steps[name] if s.rate == kept and s.kept_up]
        p99 = [v for s in at for v in s.freshness_p99.values() if v is not None]
        return kept, -max(p99, default=float("inf"))

    return max(steps, key=rank)
