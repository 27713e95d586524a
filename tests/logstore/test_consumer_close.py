"""``close_consumers``: a stop never waits on a consumer whose close hangs
(librdkafka#3740). Fakes stand in for the hanging close; the real path is every stop
of an ingest and of a worker's fetch (here, an ``Ingestor`` on a real broker; ``dts
ingest``'s Ctrl-C in tests/e2e/test_postgres_bank.py; every worker test's stop)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from logstore.broker import EmbeddedBroker
from logstore.consumer_close import close_consumers


class _Consumer:
    def __init__(self, release: threading.Event | None = None, fails: bool = False) -> None:
        self.release, self.fails, self.closed = release, fails, False

    def close(self) -> None:
        if self.release is not None:
            self.release.wait()
        if self.fails:
            raise RuntimeError("closed twice")
        self.closed = True


def test_a_close_that_hangs_is_left_behind_and_named(caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()
    quick, hung = _Consumer(), _Consumer(release)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="logstore.consumer_close"):
        stuck = close_consumers({"sources": quick, "transactions": hung}, timeout_s=0.3)
    assert stuck == ["transactions"]
    assert quick.closed and not hung.closed
    assert time.monotonic() - started < 5
    assert "transactions: the Kafka consumer did not close within" in caplog.text
    release.set()  # the close left behind finishes on its own
    deadline = time.monotonic() + 10
    while not hung.closed:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_every_consumer_is_closed_and_a_failure_raised() -> None:
    quick, failing = _Consumer(), _Consumer(fails=True)
    with pytest.raises(RuntimeError, match="closed twice"):
        close_consumers({"a": quick, "b": failing}, timeout_s=5)
    assert quick.closed


@pytest.mark.kafka
def test_an_ingestor_on_a_real_broker_closes_both_its_consumers(
    broker: EmbeddedBroker, warehouse: Path
) -> None:
    from bridge.tables import bucketer_for, log_spec_for
    from filestore import Catalog
    from logstore.ingest import Ingestor
    from logstore.topics import create_topic

    run = uuid.uuid4().hex[:6]
    source, txns = f"pg.public.close.{run}", f"pg.transaction.close.{run}"
    for topic in (source, txns):
        create_topic(broker.bootstrap, topic, 1, {})
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    table = Catalog(str(warehouse)).create_table(f"shop.close_{run}", schema, primary_key=["id"])
    ingestor = Ingestor(
        broker.bootstrap,
        source,
        log_spec_for(table),
        bucketer_for(table),
        transaction_topic=txns,
    )
    ingestor.run(idle_exit_s=0.5)
    ingestor.close()
    for consumer in (ingestor._consumer, ingestor._txn_consumer):
        assert consumer is not None
        with pytest.raises(RuntimeError, match="closed"):
            consumer.consume(num_messages=1, timeout=0)
