"""log.unavailable-values=keep-current through a real broker and worker: Debezium's
placeholder for a value the source did not send takes the key's current value (from the
same batch, from the worker's state, and from the snapshot a restarted worker seeds its
state from); a placeholder with no current value is a dead letter with its reason. The
placeholder is never stored."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from bridge.tables import log_spec_for
from filestore import Catalog
from logstore.dlq import OFFSET_HEADER, REASON_HEADER
from logstore.errors import DecodeError
from logstore.reader import DataBatch, LogReader
from logstore.unavailable import PLACEHOLDER as P
from tests.bridge.worker.support import (
    SCHEMA,
    dead_letters,
    latest_barrier,
    log_writer,
    start_worker,
    tagged_rows,
    wait_for,
)

pytestmark = pytest.mark.kafka


def _rows(*given: tuple[int, str, int]) -> pa.Table:
    ids, vs, ns = zip(*given, strict=True)
    return pa.table({"id": list(ids), "v": list(vs), "n": list(ns)}, schema=SCHEMA)


def test_placeholders_keep_the_current_value_and_an_unknown_key_is_a_dead_letter(  # type: ignore[no-untyped-def]
    broker, warehouse: Path, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    table = Catalog(str(warehouse)).create_table(
        f"db.toast_{suffix}",
        SCHEMA,
        primary_key=["id"],
        options={"bucket": "2", "log.unavailable-values": "keep-current"},
    )
    writer = log_writer(table, broker.bootstrap)
    writer.write(tagged_rows(range(0, 10), "w"))
    writer.barrier()
    # one barrier: unchanged twice in a row, a change then unchanged, an unknown key
    writer.write(_rows((1, P, 11), (1, P, 12), (2, "changed", 2), (2, P, 22), (99, P, 99)))
    second = writer.barrier()
    group = f"g-{suffix}"
    worker = start_worker(warehouse, broker.bootstrap, [table.name], group, tmp_path)
    try:
        wait_for(lambda: latest_barrier(table) == second, 90, "second barrier", worker)
    finally:
        assert worker.stop() == 0, worker.tail()
    # a restarted worker seeds its state from the snapshot: the kept values are there
    writer.write(_rows((1, P, 13), (2, P, 23)))
    third = writer.barrier()
    writer.close(final_barrier=False)
    worker = start_worker(warehouse, broker.bootstrap, [table.name], group, tmp_path)
    try:
        wait_for(lambda: latest_barrier(table) == third, 90, "third barrier", worker)
        status = worker.table_status(table.name)
    finally:
        assert worker.stop() == 0, worker.tail()
    got = {r["id"]: (r["v"], r["n"]) for r in table.read().to_pylist()}
    assert got == {
        **{i: (f"w{i}", i) for i in range(10)},
        1: ("w1", 13),
        2: ("changed", 23),
    }
    (letter,) = dead_letters(broker.bootstrap, log_spec_for(table).dlq_topic, 1)
    assert "no current value to keep" in letter[REASON_HEADER], letter
    assert status["healthy"] is True, status
    # a reader of the log fills in what it has read before, and refuses (never drops, never
    # shows the placeholder) a record whose key it has no value for: id 99's
    seen: list[dict[str, object]] = []
    reader = LogReader(broker.bootstrap, log_spec_for(table), stop_at_end=True)
    with pytest.raises(DecodeError, match="no current value to keep") as refused:
        for ev in reader:
            if isinstance(ev, DataBatch):
                seen += ev.table.to_pylist()
    reader.close()
    assert refused.value.offset == int(letter[OFFSET_HEADER])
    assert all(r["v"] != P for r in seen)
