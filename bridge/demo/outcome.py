"""What one demo run did, kept for the report (``bridge.demo.report``) and the caller."""

from __future__ import annotations

from dataclasses import dataclass, field

from bridge.demo.checks import CtasOutcome, ReadCheck, TimeTravel
from bridge.demo.generator import CdcGenerator


@dataclass
class DemoRun:
    """What happened, for the report."""

    warehouse: str = ""
    run_dir: str = ""
    html_report: str | None = None
    addresses: dict[str, str] = field(default_factory=dict)
    generator: CdcGenerator | None = None
    weak: ReadCheck | None = None
    strong: ReadCheck | None = None
    travel: TimeTravel | None = None
    ctas: CtasOutcome | None = None
    batches: dict[str, int] = field(default_factory=dict)
    worker_records: dict[str, float] = field(default_factory=dict)
    timings: list[tuple[str, float]] = field(default_factory=list)
    interrupted: bool = False
