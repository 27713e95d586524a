"""Writes the Grafana dashboards (monitoring/grafana/dashboards/*.json) with grafana-foundation-sdk.

Dashboards as code keep the three dashboards consistent (datasource, variables, units,
layout); the JSON files are what Grafana provisions. What each panel shows (title, PromQL,
unit) is in panels.py, how panels become Grafana's typed dashboard model (Grafana's own
builder library, grafana-foundation-sdk) in layout.py. Edit those, then run
``python monitoring/grafana/build_dashboards.py``; ``--check`` fails if the JSON files
are stale (tests/bridge/monitoring runs it). Every expression must use only metrics some
component exports: tests/bridge/monitoring evaluates each one against a live Prometheus.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from layout import dashboard
from panels import DASHBOARDS, Dashboard

OUT = Path(__file__).parent / "dashboards"


def render(d: Dashboard) -> str:
    # The SDK's encoder serialises its models (each has to_json); sorted keys keep the
    # files' order independent of the SDK's field order.
    return JSONEncoder(sort_keys=True, indent=2).encode(dashboard(d)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a JSON file is stale")
    args = parser.parse_args(argv)
    stale = []
    for name, d in DASHBOARDS.items():
        path = OUT / f"{name}.json"
        text = render(d)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print("stale dashboards (run python monitoring/grafana/build_dashboards.py):", *stale)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
