"""The ceiling of any Python consumer: a raw confluent-kafka consume of a topic, in a
fresh process that imports nothing else; and the ceiling of any Python ingest that
re-writes every record into a table's log: a raw copy (the consumed bytes produced as
they are into another topic, one transaction a second as the ingest's barriers, no
decode).

Run in the benchmark's own process it paid for that process's heap: every full
collection of the garbage collector walked the modules of pyarrow, polars and the
broker's helpers besides the consumed messages (2.1 CPU-s per million records there,
1.6-1.8 in a fresh process).

Usage (what ``raw_consume`` and ``raw_copy`` run):
python -m bench.raw_consume BOOTSTRAP TOPIC PARTITIONS ROWS FETCH_BYTES [SINK PRODUCER_JSON]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def raw_consume(
    bootstrap: str, topic: str, partitions: int, rows: int, fetch_bytes: int | None = None
) -> dict[str, float]:
    """Records/s and CPU seconds of a raw consume of ``rows`` records (no decode)."""
    return _run([bootstrap, topic, str(partitions), str(rows), str(fetch_bytes or 0)])


def raw_copy(
    bootstrap: str,
    topic: str,
    partitions: int,
    rows: int,
    fetch_bytes: int,
    sink: str,
    producer: dict[str, Any],
) -> dict[str, float]:
    """Records/s and CPU seconds of a raw transactional copy of ``rows`` records into
    ``sink`` (same partitions), with ``producer``'s settings (the log writer's)."""
    args = [bootstrap, topic, str(partitions), str(rows), str(fetch_bytes), sink]
    return _run([*args, json.dumps(producer)])


def _run(args: list[str]) -> dict[str, float]:
    cmd = [sys.executable, "-m", "bench.raw_consume", *args]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=400)
    if done.returncode != 0:
        raise RuntimeError(f"raw consume failed ({done.returncode}): {done.stderr[-500:]}")
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


def _consume(
    bootstrap: str,
    topic: str,
    partitions: int,
    n: int,
    fetch_bytes: int,
    sink: str | None = None,
    producer_config: dict[str, Any] | None = None,
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"raw-{uuid.uuid4().hex[:6]}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "log_level": 3,
    }
    if fetch_bytes:
        config |= {"max.partition.fetch.bytes": fetch_bytes, "fetch.max.bytes": 4 * fetch_bytes}
    consumer = Consumer(config)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    producer = None
    if sink is not None:
        txn = {"transactional.id": f"raw-copy-{uuid.uuid4().hex[:6]}"}
        producer = Producer({"bootstrap.servers": bootstrap, **(producer_config or {}), **txn})
        producer.init_transactions(30)
        producer.begin_transaction()
    got, started, cpu0 = 0, time.monotonic(), time.process_time()
    committed = started
    while got < n and time.monotonic() - started < 300:
        for m in consumer.consume(20_000, 0.2):
            if m.error() is None and m.value() is not None:
                got += 1
                if producer is not None:
                    _produce(producer, sink, m)
        if producer is not None and time.monotonic() - committed >= 1.0:
            # one transaction a second, as the ingest's barriers
            producer.commit_transaction(60)
            producer.begin_transaction()
            committed = time.monotonic()
    if producer is not None:
        producer.commit_transaction(60)
    elapsed = time.monotonic() - started
    cpu = time.process_time() - cpu0
    consumer.close()
    print(json.dumps({"rows": got, "seconds": elapsed, "rows_per_s": got / elapsed, "cpu_s": cpu}))


def _produce(producer: Any, sink: str | None, m: Any) -> None:
    while True:
        try:
            producer.produce(sink, m.value(), m.key(), m.partition())
            return
        except BufferError:  # the queue is full: let librdkafka send
            producer.poll(0.05)


if __name__ == "__main__":
    bootstrap, topic, partitions, rows, fetch = sys.argv[1:6]
    sink = sys.argv[6] if len(sys.argv) > 6 else None
    settings = json.loads(sys.argv[7]) if len(sys.argv) > 7 else None
    _consume(bootstrap, topic, int(partitions), int(rows), int(fetch), sink, settings)
