"""From samples to figures: per step and pipeline, whether it kept up, freshness p50/p99 of
every table, inconsistent reads and CPU per component; the summary with dts/stitched
ratios; the HTML page with both pipelines' curves.

Freshness of a table in a read at time t = t - the latest source change it shows
(``model.EVENT_COLUMN``). A pipeline keeps up with a step when every table was read in
the step's last third, stayed under ``LAG_CAP_S`` there, and the troughs of its freshness
over the step's last two thirds rise by at most ``MAX_SLOPE`` seconds a second (or
``GROWTH_S`` in all): a lag that grows is a pipeline falling behind, whatever its size.

The troughs, fitted by a line: a micro-batch pipeline's freshness is a sawtooth (it rises
one second a second until a batch lands, then drops), and the reads just after each drop
show how far behind its commits are. A pipeline processing a fraction p of the rate sees
them rise by 1 - p seconds a second, so ``MAX_SLOPE`` 0.1 is the search's own resolution
(within 10%). Comparing two thirds did not do: the stitched stacks' batches take 8-30 s,
a 30 s third holds one to three teeth, and its lower envelope moved by 4-7 s with one
long batch. A line needs troughs, not the window's first read (it cuts a tooth anywhere:
run 4 of 2026-11-30 kept Delta at 107,635/s on a line from there to its one commit, then
41 s without one): with fewer than ``MIN_COMMITS``, or troughs above the limit by less
than twice their slope's error, the step runs longer (``needs_longer``), and at its
longest the line judges it (under three troughs, the lag's own rise). A stream whose
last commit is further back than ``TAIL_FACTOR`` times its longest interval has stopped
keeping up, whatever its troughs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.pipeline.model import TABLES

GROWTH_S = 2.0
#: the fewest commits (troughs) in the judged window a verdict rests on: a line through
#: two points, one of them where the window happens to cut a tooth, says nothing (run 4
#: of 2026-11-30 kept Delta at 107,635/s on one commit, its last 41 s without one)
MIN_COMMITS = 3
#: a window whose last commit is further back than this many times its longest interval
#: between commits has a stream that stopped committing: a growing batch
TAIL_FACTOR = 2.0
#: the troughs' rise a step may show, seconds a second (1 - the share of the rate processed)
MAX_SLOPE = 0.1
LAG_CAP_S = 120.0
LABEL = {
    "dts": "dts",
    "delta": "stitched (Kafka -> Spark foreachBatch -> Delta MERGE x3)",
    "paimon": "stitched Paimon (Kafka -> Spark -> Paimon, lookup changelog -> 2 streams)",
}
#: per stitched stack, the summary's key of dts's rate over its rate, and its name there
RATIO = {"delta": ("rate_ratio", "stitched"), "paimon": ("paimon_rate_ratio", "stitched Paimon")}


def lags(
    samples: list[dict[str, Any]], table: str, lo: float, hi: float
) -> tuple[np.ndarray, np.ndarray]:
    """(read times, freshness) of the table's reads in [lo, hi)."""
    got = [
        (s["t"], s["t"] - s["latest"][table] / 1000)
        for s in samples
        if lo <= s["t"] < hi and s.get("latest", {}).get(table) is not None
    ]
    arr = np.array(got, dtype=float).reshape(-1, 2)
    return arr[:, 0], arr[:, 1]


def freshness(samples: list[dict[str, Any]], table: str, lo: float, hi: float) -> np.ndarray:
    return lags(samples, table, lo, hi)[1]


def troughs(times: np.ndarray, lag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The reads that follow a drop of the lag: each shows a commit that just landed."""
    drop = np.r_[False, np.diff(lag) < 0]
    return times[drop], lag[drop]


def trough_slope(times: np.ndarray, lag: np.ndarray) -> float:
    """Seconds a second the lag's troughs rise: a line through them. With fewer than two
    troughs in the window, the lag's own rise from its first read to its last."""
    t, y = troughs(times, lag)
    if t.size < 2:
        t, y = times[[0, -1]], lag[[0, -1]]
    if t[-1] <= t[0]:
        return 0.0
    return float(np.polyfit(t - t[0], y, 1)[0])


def _slope_error(t: np.ndarray, y: np.ndarray) -> float:
    """The standard error of a line's slope through (t, y), three points or more."""
    fit = np.polyfit(t - t[0], y, 1)
    residual = y - np.polyval(fit, t - t[0])
    spread = float(((t - t.mean()) ** 2).sum())
    return float(np.sqrt((residual**2).sum() / (t.size - 2) / spread)) if spread else 0.0


def _judge_lag(table: str, times: np.ndarray, lag: np.ndarray, final: bool) -> tuple[str, bool]:
    """What a table's lag over the judged window says: ("", False) kept up; (why, False)
    fell behind; (why, True) not yet clear, so the step should run longer: too few
    commits, or troughs above the limit by less than twice their slope's error (batches
    of uneven length: one long compaction's batch tilts a line through six troughs)."""
    window = float(times[-1] - times[0])
    t, y = troughs(times, lag)
    slope = trough_slope(times, lag)
    grew = slope * window
    if t.size < MIN_COMMITS:
        if final and slope > MAX_SLOPE and grew > GROWTH_S:
            return (
                f"{table}: lag grew {grew:.1f} s over {window:.0f} s with {t.size} commits",
                False,
            )
        why = f"{table}: {t.size} commits in the judged {window:.0f} s, too few to tell"
        return why, not final
    if slope > MAX_SLOPE and grew > GROWTH_S:
        error = _slope_error(t, y)
        if not final and slope - 2 * error <= MAX_SLOPE:
            return (f"{table}: troughs rise {slope:.2f} +- {error:.2f} s a second, "
                    "within their noise of the limit"), True  # fmt: skip
        return f"{table}: lag grew {grew:.1f} s over {window:.0f} s ({slope:.2f} s a second)", False
    longest, tail = float(np.diff(t).max()), float(times[-1] - t[-1])
    if tail > TAIL_FACTOR * longest and tail > GROWTH_S:
        return f"{table}: no commit in the last {tail:.0f} s (before: every {longest:.0f} s)", False
    return "", False


def _pct(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


@dataclass
class StepFigures:
    rate: int
    started: float  # unix seconds
    ended: float
    achieved: float
    kept_up: bool
    why: str
    freshness_p50: dict[str, float | None] = field(default_factory=dict)
    freshness_p99: dict[str, float | None] = field(default_factory=dict)
    reads: int = 0
    inconsistent: int = 0
    failed_reads: int = 0
    cpu: dict[str, float] = field(default_factory=dict)  # cores used per component
    shared: bool = False  # measured at the rate both pipelines share, not in the search
    undecided: list[str] = field(default_factory=list)  # tables a longer step would judge
    samples: list[dict[str, Any]] = field(default_factory=list)


def step_figures(
    samples: list[dict[str, Any]],
    rate: int,
    achieved: float,
    started: float,
    ended: float,
    cpu: dict[str, float],
    final: bool = True,
) -> StepFigures:
    """The step's figures and verdict. ``final`` False: a table with too few commits to
    judge is left undecided (``needs_longer``), not judged on the rise of its reads."""
    third = (ended - started) / 3
    fig = StepFigures(rate, started, ended, achieved, True, "", cpu=cpu)
    within = [s for s in samples if started <= s["t"] < ended]
    fig.reads = sum(1 for s in within if "wrong" in s)
    fig.inconsistent = sum(1 for s in within if s.get("wrong"))
    fig.failed_reads = sum(1 for s in within if "error" in s)
    fig.samples = [s for s in within if s.get("wrong")][:3]  # the first inconsistent reads
    problems = []
    for table in TABLES:
        whole = freshness(samples, table, started, ended)
        fig.freshness_p50[table] = _pct(whole, 50)
        fig.freshness_p99[table] = _pct(whole, 99)
        times, lag = lags(samples, table, started + third, ended)
        last = lag[times >= ended - third]
        if not last.size:
            problems.append(f"{table}: no read in the step's last third")
            continue
        why, longer = _judge_lag(table, times, lag, final)
        (fig.undecided if longer else problems).extend([why] if why else [])
        if float(last.max()) > LAG_CAP_S:
            problems.append(f"{table}: {float(last.max()):.1f} s behind")
    if achieved < 0.9 * rate:
        problems.append(f"the producer reached only {achieved:,.0f}/s")
    fig.kept_up = not problems and not fig.undecided
    fig.why = "; ".join(problems + fig.undecided)
    return fig


def needs_longer(fig: StepFigures) -> bool:
    """Whether only undecided tables (too few commits, a slope within its noise of the
    limit) stand between a step and its verdict: a longer step holds more of a slow
    pipeline's batches; a definite fault (a producer short, a lag over the cap) would
    not change."""
    return bool(fig.undecided) and fig.why == "; ".join(fig.undecided)


def lowest_failed(steps: list[StepFigures]) -> int | None:
    return min((s.rate for s in steps if not s.kept_up), default=None)


def highest_kept(steps: list[StepFigures]) -> int:
    """The highest rate kept up below every rate that was not (a step kept up above one
    that fell behind is noise, not a sustained rate)."""
    ceiling = lowest_failed(steps)
    return max(
        (s.rate for s in steps if s.kept_up and (ceiling is None or s.rate < ceiling)), default=0
    )


def summary(
    runs: dict[str, list[StepFigures]], all_samples: dict[str, list[Any]]
) -> dict[str, Any]:
    out: dict[str, Any] = {"pipelines": {}}
    for name, steps in runs.items():
        searched = [s for s in steps if not s.shared]
        reads = [s for s in all_samples.get(name, []) if "wrong" in s]
        out["pipelines"][name] = {
            "highest_rate": highest_kept(searched),
            "lowest_step": min((s.rate for s in searched), default=0),
            "reads": len(reads),
            "inconsistent_reads": sum(1 for s in reads if s["wrong"]),
            "reads_by_way": _by_way(reads),
            "shared": [asdict(s) for s in steps if s.shared],
            "steps": [asdict(s) for s in steps],
        }
    p = out["pipelines"]
    for name, (key, _) in RATIO.items():
        if "dts" not in p or name not in p:
            continue
        dts_rate, stitched = p["dts"]["highest_rate"], p[name]
        if stitched["highest_rate"]:
            out[key] = dts_rate / stitched["highest_rate"]
        elif stitched["lowest_step"]:  # kept up at no step: below its lowest, a bound only
            out[f"{key}_above"] = dts_rate / stitched["lowest_step"]
    return out


def _by_way(reads: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Per way of reading together (dts: its strong read), [inconsistent, reads]."""
    out: dict[str, list[int]] = {}
    for s in reads:
        counts = out.setdefault(s.get("way", "strong"), [0, 0])
        counts[0] += bool(s["wrong"])
        counts[1] += 1
    return out


def _f(v: float | None) -> str:
    return f"{v:.1f}" if v is not None else "-"


def format_table(runs: dict[str, list[StepFigures]]) -> str:
    head = ["pipeline", "rate/s", "kept up", *[f"{t.split('.')[-1]} p50/p99 s" for t in TABLES],
            "inconsistent reads", "CPU cores (per component)"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, steps in runs.items():
        for s in steps:
            cpu = ", ".join(f"{k} {v:.2f}" for k, v in sorted(s.cpu.items()) if v >= 0.01)
            cells = [
                name,
                f"{s.rate:,}",
                "yes" if s.kept_up else f"no ({s.why})",
                *[f"{_f(s.freshness_p50[t])} / {_f(s.freshness_p99[t])}" for t in TABLES],
                f"{s.inconsistent} of {s.reads}",
                cpu,
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_summary(report: dict[str, Any]) -> str:
    lines = []
    for name, p in report["pipelines"].items():
        rate = (
            f"{p['highest_rate']:,}/s"
            if p["highest_rate"]
            else f"below {p['lowest_step']:,}/s (fell behind at its lowest step)"
        )
        lines.append(
            f"- {LABEL.get(name, name)}: highest sustained rate {rate}; "
            f"{p['inconsistent_reads']} inconsistent of {p['reads']} reads over the run"
        )
    for key, stitched in RATIO.values():
        if key in report:
            lines.append(f"- highest sustained rate, dts / {stitched}: {report[key]:.2f}x")
        if f"{key}_above" in report:
            lines.append(
                f"- highest sustained rate, dts / {stitched}: > {report[f'{key}_above']:.0f}x "
                "(the stitched stack kept up at no step)"
            )
    for name, p in report["pipelines"].items():
        ways = "; ".join(f"{w}: {n} of {r}" for w, (n, r) in p["reads_by_way"].items())
        lines.append(f"- {LABEL.get(name, name)} reads together, inconsistent: {ways or '-'}")
        for s in p["shared"]:
            worst = max((v for v in s["freshness_p99"].values() if v is not None), default=None)
            lines.append(f"- {name} at the shared rate {s['rate']:,}/s: "
                         f"{'kept up' if s['kept_up'] else 'fell behind'}; freshness p99 of "
                         f"the slowest table {_f(worst)} s")  # fmt: skip
    return "\n".join(lines)


def write_html(
    path: Path, all_samples: dict[str, list[Any]], steps: dict[str, list[StepFigures]],
    starts: dict[str, float], text: str,
) -> None:  # fmt: skip
    """One self-contained page: per pipeline, freshness of each table over the run, the
    steps' rates, and the inconsistent reads."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = list(all_samples)
    fig = make_subplots(rows=len(names), cols=1, subplot_titles=[LABEL.get(n, n) for n in names])
    for row, name in enumerate(names, 1):
        t0 = starts[name]
        samples = all_samples[name]
        for table in TABLES:
            pts = [(s["t"] - t0, s["t"] - s["latest"][table] / 1000) for s in samples
                   if s.get("latest", {}).get(table) is not None]  # fmt: skip
            fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts],
                                     mode="lines", name=f"{name}: {table}"), row=row, col=1)  # fmt: skip
        bad = [s["t"] - t0 for s in samples if s.get("wrong")]
        fig.add_trace(go.Scatter(x=bad, y=[0] * len(bad), mode="markers", marker_color="red",
                                 name=f"{name}: inconsistent read"), row=row, col=1)  # fmt: skip
        for i, s in enumerate(steps[name]):
            fig.add_vrect(x0=s.started - t0, x1=s.ended - t0, row=row, col=1, line_width=0,
                          fillcolor="grey", opacity=0.04 + 0.04 * (i % 2),
                          annotation_text=f"{s.rate:,}/s", annotation_position="top left")  # fmt: skip
    fig.update_yaxes(title_text="freshness (s)")
    fig.update_xaxes(title_text="seconds since the pipeline started")
    fig.update_layout(height=420 * len(names), template="plotly_white",
                      title="bench-pipeline: freshness per table; red = inconsistent read")  # fmt: skip
    body = fig.to_html(full_html=False, include_plotlyjs="inline")
    pre = text.replace("&", "&amp;").replace("<", "&lt;")
    path.write_text(f"<html><head><meta charset='utf-8'><title>bench-pipeline</title></head>"
                    f"<body><pre>{pre}</pre>{body}</body></html>")  # fmt: skip
