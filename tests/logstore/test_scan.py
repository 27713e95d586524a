"""The one marker scan (`logstore.scan`) against a real broker: markers, rows, ranges."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError
from test_logstore_broker import PK_SCHEMA, table_rows

from logstore.broker import EmbeddedBroker
from logstore.client_config import confluent_config
from logstore.errors import LogScanError
from logstore.scan import PARTITION_EOF, last_barrier_on_topic, scan_range
from logstore.spec import LogSpec
from logstore.watermarks import watermark
from logstore.writer import LogWriter
from tests.logstore.support import bucketer_for, unique_topic


def _consumer(bootstrap: str, eof: bool = True) -> Consumer:
    return Consumer(
        confluent_config(
            bootstrap,
            None,
            {
                "group.id": f"scan-{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": eof,
            },
        )
    )


def test_the_eof_code_is_the_clients() -> None:
    assert PARTITION_EOF == KafkaError._PARTITION_EOF


def test_a_scan_tells_markers_from_rows_in_exactly_its_range(broker: EmbeddedBroker) -> None:
    spec = LogSpec(unique_topic("scan"), PK_SCHEMA, ["id"], 1)
    with LogWriter(broker.bootstrap, spec, bucketer_for(spec), barrier_interval_s=None) as w:
        for barrier, n in ((101, 3), (102, 4)):
            w.write(table_rows(list(range(barrier * 10, barrier * 10 + n))))
            w.barrier(barrier)
    c = _consumer(broker.bootstrap)
    try:
        _low, high = watermark(c, spec.topic, 0)
        # the transactions' commit markers take offsets too: the range ends on EOF there
        whole = list(scan_range(c, spec.topic, {0: (0, high)}, timeout_s=30))
        assert [e.marker.barrier for e in whole if e.marker] == [101, 102]
        assert sum(e.is_row for e in whole) == 7
        first_marker = next(e for e in whole if e.marker)
        assert sum(e.is_row for e in whole[: whole.index(first_marker)]) == 3
        # a range inside the log: exactly its offsets, nothing past its end
        part = list(scan_range(c, spec.topic, {0: (1, first_marker.offset)}, timeout_s=30))
        assert [e.offset for e in part] == [
            e.offset for e in whole if 1 <= e.offset < first_marker.offset
        ]
        assert list(scan_range(c, spec.topic, {0: (5, 5)}, timeout_s=30)) == []
        assert c.assignment() == []  # a scan leaves its consumer unassigned
    finally:
        c.close()
    # the writer's tail scan finds the last barrier through the same scan
    assert last_barrier_on_topic(broker.bootstrap, spec.topic, 1) == 102


def test_a_range_the_log_does_not_reach_times_out_with_a_clear_error(
    broker: EmbeddedBroker,
) -> None:
    spec = LogSpec(unique_topic("scan-short"), PK_SCHEMA, ["id"], 1)
    with LogWriter(broker.bootstrap, spec, bucketer_for(spec), barrier_interval_s=None) as w:
        w.write(table_rows([0, 1]))
        w.barrier(7)
    c = _consumer(broker.bootstrap, eof=False)
    try:
        with pytest.raises(LogScanError, match=rf"could not read {spec.topic} partitions \[0\]"):
            list(scan_range(c, spec.topic, {0: (0, 1_000)}, timeout_s=1))
    finally:
        c.close()
