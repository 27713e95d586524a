"""Where a benchmark module leaves its figures: JSON under ``--out``, with the load average
the run saw (figures without it cannot be compared)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def replace_section(path: Path, begin: str, end: str, section: str) -> None:
    """Rewrite what lies between the markers `begin` and `end` of a README with `section`
    (the text around them is the benchmark's prose, kept as it is)."""
    text = path.read_text()
    if begin not in text or end not in text:
        raise SystemExit(f"{path} has no {begin} ... {end} section to regenerate")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    body = section if section.endswith("\n") else section + "\n"
    path.write_text(f"{head}{begin}\n{body}{end}{tail}")


def save_results(out: Path, results: dict[str, Any]) -> None:
    results["load_average"] = os.getloadavg()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"\nresults in {out}")
