"""Kafka access shared by the log-tier planner (driver) and reader (executors)."""

from __future__ import annotations

import uuid
from typing import Any

# confluent_kafka, logstore's client config and bridge.tables (LogWriter) are imported
# where used: every Python worker of a plain batch scan imports the source module, and
# should not pay for Kafka's client library.

#: how long the broker may hold a fetch that finds nothing new (librdkafka: 500 ms). A
#: consumer waits for its fetch in flight before a seek's fetch can go out, so an idle
#: kept consumer (`read.log`) re-positioned for a range that does not start where its last
#: one ended (another query's range of the partition, a replay, a task that moved between
#: Python workers) waited ~300 ms on average; and the driver's marker scan learns the end
#: of a partition only from an empty fetch. Idle consumers ask 40 times a second: cheap
#: next to a micro-batch's latency.
FETCH_WAIT_MS = 25


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
            "fetch.wait.max.ms": FETCH_WAIT_MS,
        },
    )


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    from logstore.watermarks import watermarks as ask

    c = consumer(bootstrap, eof=False)
    try:
        return ask(c, topic, partitions)
    finally:
        c.close()
