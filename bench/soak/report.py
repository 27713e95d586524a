"""What a soak shows: a progress block per sample, the verdict table, the JSON and an HTML
page with every series over time (plotly inlined, as ``bench.pipeline.report`` draws)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from bench.soak.collect import Sample
from bench.soak.series import metric_of
from bench.soak.verdict import Verdict

#: the columns of the progress block's tables, per group
COLUMNS = {
    "process": ("rss_mb", "heap_live_mb", "cpu_cores", "threads", "open_files"),
    "table": ("mb", "files_per_bucket", "manifests", "snapshots", "appends", "compactions"),
    "dir": ("mb", "files"),
}


def num(v: float | None) -> str:
    if v is None:
        return "-"
    if isinstance(v, int) or abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def clock(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def _grid(group: str, values: dict[str, float | None]) -> list[str]:
    metrics = COLUMNS[group]
    subjects = sorted({k.split("/")[1] for k in values if k.startswith(f"{group}/")})
    head = [group, *(metric_of(f"x/x/{m}").label for m in metrics)]
    rows = [[s, *(num(values.get(f"{group}/{s}/{m}")) for m in metrics)] for s in subjects]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return [
        "  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                         enumerate(zip(r, widths, strict=True)))
        for r in [head, *rows]
    ]  # fmt: skip


def progress(sample: Sample, total_s: float) -> str:
    """The progress line (elapsed / total, input, freshness, reads) and the sample's tables."""
    v = sample.values
    fresh = ", ".join(
        f"{k.split('/')[1]} {num(x)} s" for k, x in v.items() if k.startswith("freshness/")
    )
    line = (
        f"[{time.strftime('%H:%M:%S', time.localtime(sample.t))}] "
        f"{clock(sample.elapsed_s)} / {clock(total_s)}  "
        f"{num(v.get('source/orders/changes_per_s'))} changes/s  freshness p99: {fresh}  "
        f"strong reads {num(v.get('probe/strong/reads'))} "
        f"({num(v.get('probe/strong/disagreed'))} disagreed, "
        f"{num(v.get('probe/strong/read_errors'))} failed)  "
        f"load {num(v.get('machine/all/load_1m'))}"
    )
    lines = [line, *(row for group in COLUMNS for row in _grid(group, v))]
    lines += [f"  sample error: {e}" for e in sample.errors]
    return "\n".join(lines)


def verdict_table(verdicts: Sequence[Verdict]) -> str:
    head = ["series", "unit", "first", "last", "slope /h", "growth", "bound", "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v in verdicts:
        verdict = "pass" if v.passed else "**FAIL**"
        if v.note:
            verdict += f" ({v.note})"
        cells = [v.series, metric_of(v.series).label, num(v.first), num(v.last),
                 num(v.slope_per_h), num(v.growth), num(v.bound), verdict]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_html(
    path: Path,
    samples: Sequence[Sample],
    verdicts: Sequence[Verdict],
    window: tuple[float, float],
    text: str,
) -> None:
    """One self-contained page: every series over the run (a subplot each, the judged
    window shaded, its fitted line drawn; red title = failed), the summary above."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    since, until = window  # seconds into the run
    names = sorted({k for s in samples for k in s.values})
    judged = {v.series: v for v in verdicts}
    cols = 3
    rows = max(1, -(-len(names) // cols))
    titles = []
    for n in names:
        v = judged.get(n)
        mark = "" if v is None else (" ✓" if v.passed else " ✗ FAIL")
        titles.append(f"{n} ({metric_of(n).label}){mark}")
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, vertical_spacing=0.4 / rows)
    minutes = [s.elapsed_s / 60 for s in samples]
    for i, name in enumerate(names):
        row, col = i // cols + 1, i % cols + 1
        ys = [s.values.get(name) for s in samples]
        fig.add_trace(go.Scatter(x=minutes, y=ys, mode="lines+markers", name=name,
                                 showlegend=False), row=row, col=col)  # fmt: skip
        v = judged.get(name)
        if v is not None and v.line is not None:
            fig.add_trace(go.Scatter(x=[since / 60, until / 60], y=list(v.line), mode="lines",
                                     line={"dash": "dash", "color": "green" if v.passed else "red"},
                                     showlegend=False), row=row, col=col)  # fmt: skip
        fig.add_vrect(x0=since / 60, x1=until / 60, row=row, col=col, line_width=0,
                      fillcolor="grey", opacity=0.07)  # fmt: skip
    fig.update_xaxes(title_text="minutes")
    fig.update_layout(height=260 * rows, template="plotly_white", title="soak: every series "
                      "over the run; shaded: the judged last two thirds, dashed: its fitted line")  # fmt: skip
    body = fig.to_html(full_html=False, include_plotlyjs="inline")
    pre = text.replace("&", "&amp;").replace("<", "&lt;")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"<html><head><meta charset='utf-8'><title>soak</title></head>"
                    f"<body><pre>{pre}</pre>{body}</body></html>")  # fmt: skip
