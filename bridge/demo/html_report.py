"""The demo's HTML report: one self-contained page (plotly.js inlined, no network needed).

Two charts from the metrics the MetaService exported during the run (``metrics_history``):
freshness per table (how old its latest completed barrier is) and, per derived table,
how far the consistent version of its lineage group trails it.
"""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go

from bridge.demo.errors import ReportDataMissing
from bridge.demo.metrics_history import CONSISTENT_LAG, FRESHNESS, MetricsHistory


def _figure(history: MetricsHistory, metric: str, title: str, label: str) -> object:
    fig = go.Figure()
    for series in history.of(metric):
        xs = [t for t, _ in series.points]
        ys = [v / 1000 for _, v in series.points]  # ms -> s: what a person reads
        fig.add_trace(
            go.Scatter(x=xs, y=ys, mode="lines+markers", name=series.labels.get(label, series.name))
        )
    fig.update_layout(
        title=title,
        xaxis_title="seconds since the demo started",
        yaxis_title="seconds",
        template="plotly_white",
        height=420,
        legend_title=label,
    )
    return fig


def write_html_report(
    history: MetricsHistory, path: Path, *, source: str, summary: list[str] | None = None
) -> Path:
    """Write the report to ``path``; ``source`` says where the samples came from."""
    if not history.of(FRESHNESS):
        raise ReportDataMissing(
            f"no {FRESHNESS} sample in {history.scrapes} scrapes ({history.failures} failed); "
            "the MetaService exported nothing to chart"
        )
    charts = [
        _figure(
            history,
            FRESHNESS,
            "Freshness per table: age of its latest completed barrier",
            "table",
        ),
        _figure(
            history,
            CONSISTENT_LAG,
            "Consistent-version lag: how far the group's consistent barrier trails each table",
            "table",
        ),
    ]
    parts = []
    for i, fig in enumerate(charts):
        # plotly.js once (inline, so the file works offline), then each chart's div
        parts.append(
            fig.to_html(  # type: ignore[attr-defined]
                full_html=False, include_plotlyjs=(i == 0), div_id=f"chart-{i}"
            )
        )
    items = "".join(f"<li>{_escape(line)}</li>" for line in summary or [])
    html = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>dts demo report</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}</style></head>
<body><h1>dts demo report</h1>
<p>Metrics scraped {_escape(source)}: {history.scrapes} scrapes,
{sum(len(s.points) for s in history.series.values())} samples.</p>
<ul>{items}</ul>
{"".join(parts)}
</body></html>
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html)
    return path


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
