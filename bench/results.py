"""Where a benchmark module leaves its figures: JSON under ``--out``, with the load average
the run saw (figures without it cannot be compared)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def save_results(out: Path, results: dict[str, Any]) -> None:
    results["load_average"] = os.getloadavg()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"\nresults in {out}")
