"""No silent drops: a plain producer writes a table's topic beside the LogWriter.

Debezium connectors and hand-written producers are neither transactional nor ours:
every valid record they write must reach the FileStore exactly once (in the barrier
whose marker follows it), every invalid one must reach ``<topic>.dlq`` with a reason,
and the counts must add up.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path

import pyarrow as pa
from confluent_kafka import Producer

from bridge.tables import log_spec_for
from filestore import Catalog, bucket_ids
from logstore.dlq import OFFSET_HEADER, REASON_HEADER
from logstore.writer import LogWriter
from tests.bridge.worker.support import (
    SCHEMA,
    dead_letters,
    latest_barrier,
    plain_records,
    start_worker,
    tagged_rows,
    wait_for,
)

INVALID = [
    b'{"before": null, "after": {"id": 1,',  # cut short
    b'{"before": null, "after": {"id": 2, "v": "x", "n": 2}, "op": "z"}',
    b'{"before": null, "after": {"id": "three", "v": "x", "n": 3}, "op": "c"}',
    b'{"before": null, "after": null, "op": "c"}',
]


def test_plain_producer_beside_log_writer_every_record_applied_or_dead_lettered(  # type: ignore[no-untyped-def]
    broker, warehouse: Path, tmp_path: Path
) -> None:
    # no primary key: a record applied twice would show as a duplicate row
    table = Catalog(str(warehouse)).create_table(
        f"db.plain_{uuid.uuid4().hex[:8]}", SCHEMA, options={"bucket": "2"}
    )
    spec = log_spec_for(table)
    keys, n = table.bucket_keys, spec.buckets
    writer = LogWriter(
        broker.bootstrap, spec, lambda t: bucket_ids(t, keys, n), barrier_interval_s=None
    )
    plain = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    invalid_offsets: list[int] = []

    def produce_plain(rows: pa.Table, bad: list[bytes]) -> None:
        for p, value in plain_records(rows, n, keys):
            plain.produce(spec.topic, value, None, p)
        for value in bad:
            plain.produce(
                spec.topic,
                value,
                None,
                0,
                on_delivery=lambda err, msg: invalid_offsets.append(msg.offset()),
            )
        assert plain.flush(30) == 0

    worker = start_worker(
        warehouse, broker.bootstrap, [table.name], f"g-{uuid.uuid4().hex[:8]}", tmp_path
    )
    try:
        writer.write(tagged_rows(range(0, 50), "w"))
        first = writer.barrier()
        produce_plain(tagged_rows(range(100, 120), "p"), INVALID[:2])  # between two transactions
        writer.write(tagged_rows(range(50, 80), "w"))
        produce_plain(
            tagged_rows(range(120, 140), "p"), INVALID[2:]
        )  # inside the writer's open one
        second = writer.barrier()
        wait_for(lambda: latest_barrier(table) == second, 90, "barrier 2", worker)

        at_first = table.read(barrier=first, columns=["id"]).column("id").to_pylist()
        assert sorted(at_first) == list(range(0, 50))
        got = table.read(barrier=second, columns=["id", "v"])
        ids = got.column("id").to_pylist()
        expected = [*range(0, 80), *range(100, 140)]
        assert len(ids) == len(expected) == 120  # 80 from the writer + 40 plain, once each
        assert sorted(ids) == expected
        assert sorted(v for v in got.column("v").to_pylist() if v.startswith("p")) == sorted(
            f"p{i}" for i in range(100, 140)
        )

        letters = dead_letters(broker.bootstrap, spec.dlq_topic, len(INVALID))
        assert len(letters) == len(INVALID)
        assert sorted(int(d[OFFSET_HEADER]) for d in letters) == sorted(invalid_offsets)
        assert all(d[REASON_HEADER] for d in letters)

        status = json.loads(
            urllib.request.urlopen(f"http://127.0.0.1:{worker.web_port}/status", timeout=5).read()
        )
        t = status["tables"][table.name]
        assert t["last_barrier_committed"] == second
        assert t["dlq_records"] == len(INVALID)  # counted, not only sent
    finally:
        writer.close(final_barrier=False)
        code = worker.stop()
    assert code == 0, worker.tail()
