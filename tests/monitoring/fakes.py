"""A stand-in for the FileStore API the exporter reads, for unit tests of its arithmetic.

Real-path tests use the real ``filestore.Catalog`` (tests/monitoring/test_exporter.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class FakeFile:
    level: int
    file_size: int


@dataclass(frozen=True)
class FakeSplit:
    partition: dict[str, Any]
    bucket: int
    files: list[FakeFile]


@dataclass(frozen=True)
class FakeSnapshot:
    id: int
    barrier: int | None
    total_record_count: int | None = 0


@dataclass(frozen=True)
class FakeSchema:
    primary_key: list[str]


@dataclass(frozen=True)
class FakeOptions:
    num_sorted_run_stop_trigger: int = 10
    barrier_interval_ms: int = 1000


@dataclass
class FakeTable:
    name: str
    schema: FakeSchema
    options: FakeOptions = field(default_factory=FakeOptions)
    history: list[tuple[FakeSnapshot, list[FakeSplit]]] = field(default_factory=list)
    scans: int = 0

    def latest_snapshot(self) -> FakeSnapshot | None:
        return self.history[-1][0] if self.history else None

    def snapshot(self, snapshot_id: int) -> FakeSnapshot:
        for snap, _ in self.history:
            if snap.id == snapshot_id:
                return snap
        raise KeyError(snapshot_id)

    def new_scan(self, snapshot_id: int | None = None) -> FakeScan:
        self.scans += 1
        for snap, splits in self.history:
            if snap.id == snapshot_id:
                return FakeScan(splits)
        raise KeyError(snapshot_id)


@dataclass
class FakeScan:
    splits: list[FakeSplit]

    def plan(self) -> list[FakeSplit]:
        return self.splits


@dataclass
class FakeCatalog:
    """Tables by name; writes snapshot-<N> files where the layout says they live."""

    warehouse: Path
    tables: dict[str, FakeTable] = field(default_factory=dict)
    broken: set[str] = field(default_factory=set)

    def list_tables(self, db: str | None = None) -> list[str]:
        return sorted(set(self.tables) | self.broken)

    def get_table(self, name: str) -> FakeTable:
        if name in self.broken:
            raise RuntimeError(f"schema of {name} is unreadable")
        return self.tables[name]

    def add(self, table: FakeTable) -> FakeTable:
        self.tables[table.name] = table
        return table

    def commit(self, name: str, snapshot: FakeSnapshot, splits: list[FakeSplit]) -> None:
        self.tables[name].history.append((snapshot, splits))
        db, _, tbl = name.partition(".")
        snap_dir = self.warehouse / f"{db}.db" / tbl / "snapshot"
        snap_dir.mkdir(parents=True, exist_ok=True)
        (snap_dir / f"snapshot-{snapshot.id}").write_text("{}")
