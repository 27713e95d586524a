"""Which tables the worker serves and how: upsert normalization for retracting merge
engines (across a restart), and tables created while the worker runs.

Real embedded broker, real FileStore, `dts worker` processes.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from filestore import Catalog
from tests.bridge.worker.support import (
    Changelog,
    create_table,
    latest_barrier,
    log_writer,
    produce,
    rows_at,
    start_worker,
    wait_for,
)

pytestmark = pytest.mark.kafka

AGG_SCHEMA = pa.schema([("id", pa.int64()), ("n", pa.int64())])


class UpsertSums:
    """Upserts and key-only deletes of a sum table, with the expected table state.

    The worker normalizes the upsert log: a changed key becomes -U old / +U new, an
    identical re-send nothing, a delete the full -D row, a delete of an unknown key
    nothing. The FileStore's aggregation engine retracts -U (sum subtracts it) and,
    with aggregation.remove-record-on-delete, lets -D remove the key, so a key's sum
    is its latest upstream value and a deleted key is gone.
    """

    def __init__(self) -> None:
        self.last: dict[int, int] = {}
        self.sums: dict[int, int] = {}
        self.ids: list[int] = []
        self.ns: list[int | None] = []
        self.kinds: list[str] = []

    def upsert(self, k: int, n: int) -> None:
        if k not in self.last:
            self.sums[k] = n
        elif self.last[k] != n:
            self.sums[k] += n - self.last[k]  # -U old, +U new
        self.last[k] = n
        self.ids.append(k)
        self.ns.append(n)
        self.kinds.append("+U")

    def delete(self, k: int) -> None:
        self.last.pop(k, None)
        self.sums.pop(k, None)
        self.ids.append(k)
        self.ns.append(None)  # key only: the worker rebuilds the full row from state
        self.kinds.append("-D")

    def take(self) -> pa.Table:
        t = pa.table({"id": self.ids, "n": self.ns, "_row_kind": self.kinds})
        self.ids, self.ns, self.kinds = [], [], []
        return t.cast(pa.schema([*AGG_SCHEMA, pa.field("_row_kind", pa.string())]))


def test_sum_table_from_upsert_log_is_right_across_a_restart(  # type: ignore[no-untyped-def]
    broker, warehouse: Path, tmp_path: Path
) -> None:
    table = Catalog(str(warehouse)).create_table(
        f"db.agg_{uuid.uuid4().hex[:8]}",
        AGG_SCHEMA,
        primary_key=["id"],
        options={
            "bucket": "2",
            "merge-engine": "aggregation",
            "fields.n.aggregate-function": "sum",
            "aggregation.remove-record-on-delete": "true",
            "log.changelog-mode": "upsert",
        },
    )
    writer = log_writer(table, broker.bootstrap)
    group = f"g-{uuid.uuid4().hex[:8]}"
    sums = UpsertSums()
    for k in range(10):
        sums.upsert(k, k + 1)
    writer.write(sums.take())
    first = writer.barrier()
    for k in range(5):
        sums.upsert(k, 100 + k)  # changed: -U old, +U new
    sums.upsert(5, 6)  # an identical re-send: adds nothing
    sums.upsert(7, 8)  # in the same barrier as its change below
    sums.upsert(7, 70)
    sums.delete(6)
    sums.delete(42)  # unknown key: nothing
    writer.write(sums.take())
    second = writer.barrier()
    before_restart = dict(sums.sums)

    def state() -> dict[int, int]:
        t = table.read(columns=["id", "n"])
        return dict(zip(t.column("id").to_pylist(), t.column("n").to_pylist(), strict=True))

    w = start_worker(warehouse, broker.bootstrap, [table.name], group, tmp_path)
    try:
        wait_for(lambda: latest_barrier(table) == second, 60, "the first run", w)
    finally:
        assert w.stop() == 0, w.tail()
    assert state() == before_restart
    assert latest_barrier(table) == second and first < second

    # after the restart the state comes from the FileStore: deletes of keys written
    # before still find their rows, and updates still retract the right row
    sums.delete(7)
    sums.delete(8)
    sums.upsert(0, 1000)
    sums.upsert(9, 900)
    sums.upsert(6, 60)  # deleted before the restart: new again
    writer.write(sums.take())
    third = writer.barrier()
    w = start_worker(warehouse, broker.bootstrap, [table.name], group, tmp_path)
    try:
        wait_for(lambda: latest_barrier(table) == third, 60, "the second run", w)
    finally:
        code = w.stop()
        writer.close(final_barrier=False)
    assert code == 0, w.tail()
    assert state() == sums.sums
    assert 7 not in state() and 8 not in state()
    assert state()[0] == 1000  # 1, then -U 1 +U 100, then -U 100 +U 1000
    assert state()[6] == 60 and state()[1] == 101


def test_table_created_after_start_is_consumed_without_restart(  # type: ignore[no-untyped-def]
    broker, warehouse: Path, tmp_path: Path
) -> None:
    first = create_table(warehouse, buckets=2)
    log_a = Changelog(seed=5)
    writer_a = log_writer(first, broker.bootstrap)
    barriers_a = produce(writer_a, log_a, barriers=1, rows_per_barrier=50)
    w = start_worker(
        warehouse,
        broker.bootstrap,
        [],  # every table, including those created later
        f"g-{uuid.uuid4().hex[:8]}",
        tmp_path,
        extra_args=["--table-scan-interval", "1"],
    )
    writer_b = None
    try:
        wait_for(lambda: latest_barrier(first) == barriers_a[-1], 60, "the first table", w)
        second = create_table(warehouse, buckets=3)
        log_b = Changelog(seed=6)
        writer_b = log_writer(second, broker.bootstrap)  # creates the table's topic
        barriers_b = produce(writer_b, log_b, barriers=2, rows_per_barrier=50)
        wait_for(lambda: latest_barrier(second) == barriers_b[-1], 60, "the new table", w)
        for b in barriers_b:
            assert rows_at(second, b) == log_b.expected(b)
        # the first table goes on after the rebalance that added the second
        barriers_a += produce(writer_a, log_a, barriers=1, rows_per_barrier=50)
        wait_for(lambda: latest_barrier(first) == barriers_a[-1], 60, "the first table again", w)
        for b in barriers_a:
            assert rows_at(first, b) == log_a.expected(b)
        assert "found by the catalog scan" in w.output()
    finally:
        writer_a.close(final_barrier=False)
        if writer_b is not None:
            writer_b.close(final_barrier=False)
        code = w.stop()
    assert code == 0, w.tail()
