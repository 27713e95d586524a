"""Does a series grow beyond its noise over the judged window (the run's last two thirds)?

A least-squares line through the window's samples gives the slope; the growth is what the
slope adds over the whole window (in the metric's worse direction), the noise the standard
deviation of the samples around the line. A series passes when

    growth <= bound = max(3 x noise, the metric's floor)

so a flat series passes however noisy, and a sawtooth (segments rolled and deleted,
snapshots retained and expired, a garbage-collected heap) passes as long as its teeth do not
climb; a steady climb fails once it outgrows both its noise and the floor. The first third
is warm-up (JVMs growing their heaps, the first compactions and expirations) and not judged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench.soak.series import Metric

#: fewer judged samples than this and a line says nothing
MIN_SAMPLES = 3


@dataclass(frozen=True)
class Verdict:
    series: str
    samples: int
    first: float | None  # the window's first and last values
    last: float | None
    slope_per_h: float | None
    growth: float | None  # the line's rise over the window, in the worse direction
    noise: float | None  # residual standard deviation
    bound: float | None
    passed: bool
    note: str = ""
    line: tuple[float, float] | None = None  # the fitted line at the window's two ends


def judge(
    series: str, t: np.ndarray, y: np.ndarray, metric: Metric, since: float, until: float
) -> Verdict:
    """``t`` in seconds, ``y`` the values (NaN: not sampled); judged over [since, until]."""
    keep = (t >= since) & (t <= until) & np.isfinite(y)
    tw, yw = t[keep], y[keep]
    if tw.size < MIN_SAMPLES:
        note = f"{tw.size} samples in the judged window, {MIN_SAMPLES} needed"
        return Verdict(series, int(tw.size), None, None, None, None, None, None, False, note)
    if np.ptp(yw) == 0:  # constant: exactly flat (a fit would leave a ~1e-16 slope)
        slope, intercept = 0.0, float(yw[0])
    else:
        slope, intercept = np.polyfit(tw - since, yw, 1)
    residual = yw - (slope * (tw - since) + intercept)
    noise = float(np.std(residual, ddof=2)) if tw.size > 2 else 0.0
    rise = float(slope) * (until - since)
    growth = rise if metric.worse == "up" else -rise
    floor = max(metric.floor, metric.rel * abs(float(np.median(yw))))
    bound = max(3 * noise, floor)
    return Verdict(
        series,
        int(tw.size),
        float(yw[0]),
        float(yw[-1]),
        float(slope) * 3600,
        growth,
        noise,
        bound,
        growth <= bound,
        line=(float(intercept), float(intercept) + rise),
    )
