"""One rule for every table kind: a record a table cannot take is a dead letter (issue 40).

A worker serves a primary-key table and an append table. Each table's log gets the same
mix between two barriers of the LogWriter: valid rows, malformed records, and one valid
change whose ``after`` also carries a field the table does not have (``"zzz": [1, 2]``).
Both tables must commit every valid row exactly once, dead-letter every other record
with its reason (the unknown field named), count them, and never stall.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from bridge.tables import log_spec_for
from filestore import Catalog, Table
from logstore.dlq import OFFSET_HEADER, REASON_HEADER
from tests.bridge.worker.support import (
    SCHEMA,
    dead_letters,
    latest_barrier,
    log_writer,
    plain_records,
    start_worker,
    tagged_rows,
    wait_for,
)

pytestmark = pytest.mark.kafka

MALFORMED = [
    b'{"before": null, "after": {"id": 1,',  # cut short
    b'{"before": null, "after": {"id": "three", "v": "x", "n": 3}, "op": "c"}',  # wrong type
    b'{"before": null, "after": null, "op": "c"}',  # no image
    b"[1, 2]",  # not an envelope
]
UNKNOWN_FIELD = orjson.dumps(
    {"before": None, "after": {"id": 500, "v": "u", "n": 500, "zzz": [1, 2]}, "op": "c"}
)


def _feed(table: Table, bootstrap: str, plain: Producer) -> tuple[int, list[int]]:
    """The same mixed log for ``table``; returns its last barrier and the offsets of the
    records that must be dead-lettered."""
    spec = log_spec_for(table)
    writer = log_writer(table, bootstrap)
    bad: list[int] = []
    try:
        writer.write(tagged_rows(range(0, 30), "w"))
        writer.barrier()
        valid = plain_records(tagged_rows(range(100, 110), "p"), spec.buckets, table.bucket_keys)
        # the unknown field sits between valid records in every partition it shares
        for i, (p, value) in enumerate(valid):
            plain.produce(spec.topic, value, None, p)
            if i == len(valid) // 2:
                for poison in [UNKNOWN_FIELD, *MALFORMED]:
                    plain.produce(
                        spec.topic,
                        poison,
                        None,
                        p,
                        on_delivery=lambda err, msg: bad.append(msg.offset()),
                    )
        assert plain.flush(30) == 0
        writer.write(tagged_rows(range(30, 60), "w"))
        last = writer.barrier()
    finally:
        writer.close(final_barrier=False)
    return last, bad


def test_both_table_kinds_commit_every_valid_row_and_dead_letter_the_rest(  # type: ignore[no-untyped-def]
    broker, warehouse: Path, tmp_path: Path
) -> None:
    catalog = Catalog(str(warehouse))
    suffix = uuid.uuid4().hex[:8]
    keyed = catalog.create_table(
        f"db.keyed_{suffix}", SCHEMA, primary_key=["id"], options={"bucket": "2"}
    )
    append = catalog.create_table(f"db.append_{suffix}", SCHEMA, options={"bucket": "2"})
    plain = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    fed = {t.name: _feed(t, broker.bootstrap, plain) for t in (keyed, append)}
    worker = start_worker(
        warehouse, broker.bootstrap, [keyed.name, append.name], f"g-{suffix}", tmp_path
    )
    try:
        for t in (keyed, append):
            last = fed[t.name][0]
            wait_for(lambda t=t, last=last: latest_barrier(t) == last, 90, t.name, worker)
        expected = [*range(0, 60), *range(100, 110)]
        for t in (keyed, append):
            ids = t.read(columns=["id"]).column("id").to_pylist()
            assert sorted(ids) == expected, t.name  # every valid row, once; not id 500
            letters = dead_letters(broker.bootstrap, log_spec_for(t).dlq_topic, 1 + len(MALFORMED))
            assert sorted(int(d[OFFSET_HEADER]) for d in letters) == sorted(fed[t.name][1])
            reasons = [d[REASON_HEADER] for d in letters]
            assert sum("columns the table does not have: zzz" in r for r in reasons) == 1, reasons
            status = worker.table_status(t.name)
            assert status["dlq_records"] == 1 + len(MALFORMED), status
            assert status["healthy"] is True and status["stalled"] is None, status
    finally:
        code = worker.stop()
    assert code == 0, worker.tail()
