"""The ceiling of any Python consumer: a raw confluent-kafka consume of a topic, in a
fresh process that imports nothing else.

Run in the benchmark's own process it paid for that process's heap: every full
collection of the garbage collector walked the modules of pyarrow, polars and the
broker's helpers besides the consumed messages (2.1 CPU-s per million records there,
1.6-1.8 in a fresh process).

Usage (what ``raw_consume`` runs): python -m bench.raw_consume BOOTSTRAP TOPIC PARTITIONS ROWS [FETCH_BYTES]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def raw_consume(
    bootstrap: str, topic: str, partitions: int, rows: int, fetch_bytes: int | None = None
) -> dict[str, float]:
    """Records/s and CPU seconds of a raw consume of ``rows`` records (no decode)."""
    cmd = [sys.executable, "-m", "bench.raw_consume", bootstrap, topic, str(partitions),
           str(rows), str(fetch_bytes or 0)]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=400)
    if done.returncode != 0:
        raise RuntimeError(f"raw consume failed ({done.returncode}): {done.stderr[-500:]}")
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


def _consume(bootstrap: str, topic: str, partitions: int, n: int, fetch_bytes: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

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
    got, started, cpu0 = 0, time.monotonic(), time.process_time()
    while got < n and time.monotonic() - started < 300:
        for m in consumer.consume(20_000, 0.2):
            if m.error() is None and m.value() is not None:
                got += 1
    elapsed = time.monotonic() - started
    cpu = time.process_time() - cpu0
    consumer.close()
    print(json.dumps({"rows": got, "seconds": elapsed, "rows_per_s": got / elapsed, "cpu_s": cpu}))


if __name__ == "__main__":
    bootstrap, topic, partitions, rows, fetch = sys.argv[1:6]
    _consume(bootstrap, topic, int(partitions), int(rows), int(fetch))
