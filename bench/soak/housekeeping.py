"""Orphan cleanup, which nothing runs on its own: the FileStore's ``Table.remove_orphans``
(what ``dts table remove-orphans`` runs) on every table, every period.

A cleanup walks every retained snapshot's manifests while the writers' commits expire the
oldest ones; a manifest list expired under the walk fails it (FileNotFoundError). That
failure is recorded, and the table tried again, up to ``ATTEMPTS`` times a period."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from filestore import Catalog

ATTEMPTS = 3


@dataclass
class OrphanCleanup:
    warehouse: str
    tables: Sequence[str]
    every_s: float
    older_than_ms: int
    runs: list[dict[str, Any]] = field(default_factory=list)
    _next: float = 0.0

    def run_if_due(self, now: float) -> dict[str, Any] | None:
        if now < self._next:
            return None
        self._next = now + self.every_s
        started = time.monotonic()
        run: dict[str, Any] = {"t": now, "deleted": {}, "bytes": 0, "errors": []}
        catalog = Catalog(self.warehouse)
        for name in self.tables:
            for _ in range(ATTEMPTS):
                try:
                    result = catalog.get_table(name).remove_orphans(self.older_than_ms)
                except Exception as exc:  # recorded; tried again, then next period
                    run["errors"].append(f"{name}: {type(exc).__name__}: {str(exc)[:200]}")
                    continue
                run["deleted"][name] = len(result.deleted)
                run["bytes"] += result.bytes
                break
        run["seconds"] = time.monotonic() - started
        self.runs.append(run)
        return run


def cleanup_summary(runs: list[dict[str, Any]]) -> str:
    """One line: how often it ran, what it deleted, how many attempts failed (and why)."""
    deleted = sum(sum(r["deleted"].values()) for r in runs)
    size = sum(r["bytes"] for r in runs)
    errors = [e for r in runs for e in r["errors"]]
    # tables whose every attempt of a run failed (an error names its table first)
    gave_up = sum(
        1 for r in runs for t in {e.split(":")[0] for e in r["errors"]} if t not in r["deleted"]
    )
    line = (f"orphan cleanup: {len(runs)} runs, {deleted} files ({size / 2**20:.2f} MB) deleted, "
            f"{len(errors)} failed attempts, {gave_up} tables left for the next run")  # fmt: skip
    return line + (f" (first: {errors[0]})" if errors else "")
