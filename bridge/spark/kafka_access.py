"""Kafka access shared by the log-tier planner (driver) and reader (executors)."""

from __future__ import annotations

import uuid
from typing import Any

# confluent_kafka, logstore's client config and bridge.tables (LogWriter) are imported
# where used: every Python worker of a plain batch scan imports the source module, and
# should not pay for Kafka's client library.

EOF_FETCH_WAIT_MS = 25


def consumer(bootstrap: str, *, eof: bool, isolation: str = "read_committed") -> Any:
    """A consumer that is only ever `assign()`ed (never subscribed, commits nothing)."""
    from confluent_kafka import Consumer

    return Consumer(consumer_config(bootstrap, eof=eof, isolation=isolation))


def consumer_config(bootstrap: str, *, eof: bool, isolation: str) -> dict[str, Any]:
    from logstore.client_config import client_logger, confluent_config

    return confluent_config(
        bootstrap,
        None,
        {
            # librdkafka's lines go to the `logstore.kafka` logger, each condition once:
            # a kept consumer outliving its broker (a stopped test or benchmark broker)
            # printed a line per reconnect to stderr. It never calls committed(), so the
            # NOT_COORDINATOR quirk of consumers with a logger (client_config) cannot hit.
            "logger": client_logger(),
            "group.id": f"dts-spark-{uuid.uuid4().hex}",  # never subscribed: assign() only
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": eof,
            "auto.offset.reset": "error",
            # the end of a partition (EOF) is only learnt from a fetch that returns
            # nothing, which the broker holds up to this long (librdkafka: 500 ms):
            # the driver's marker scan waits for EOF, so that wait was micro-batch
            # latency; executors read known ranges and keep the default
            **({"fetch.wait.max.ms": EOF_FETCH_WAIT_MS} if eof else {}),
        },
    )


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    from logstore.watermarks import watermarks as ask

    c = consumer(bootstrap, eof=False)
    try:
        return ask(c, topic, partitions)
    finally:
        c.close()
