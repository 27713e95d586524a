"""Dead-letter topic ``<topic>.dlq``: bad records kept with the reason in a header."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from confluent_kafka import Producer

from logstore.client_config import confluent_config
from logstore.codec import DecodeFailure
from logstore.errors import LogStoreError
from logstore.spec import LogSpec
from logstore.topics import ensure_dlq_topic

REASON_HEADER = "dts.dlq.reason"
TOPIC_HEADER = "dts.dlq.topic"
PARTITION_HEADER = "dts.dlq.partition"
OFFSET_HEADER = "dts.dlq.offset"


class DeadLetterQueue:
    """Routes decode failures to ``<topic>.dlq`` and counts them. Nothing is dropped silently."""

    def __init__(self, bootstrap: str, spec: LogSpec) -> None:
        self.spec = spec
        self.topic = spec.dlq_topic
        ensure_dlq_topic(bootstrap, spec)
        self._producer = Producer(
            confluent_config(
                bootstrap, {"linger.ms": 5, "log_level": 3}, {"enable.idempotence": True}
            )
        )
        self.count = 0
        self.reasons: dict[str, int] = {}

    def send(self, failures: Iterable[DecodeFailure], source_topic: str | None = None) -> int:
        n = 0
        for f in failures:
            original = f.headers.items() if isinstance(f.headers, Mapping) else (f.headers or [])
            headers: list[tuple[str, str | bytes | None]] = list(original)
            headers += [
                (REASON_HEADER, f.reason.encode()),
                (TOPIC_HEADER, (source_topic or self.spec.topic).encode()),
                (PARTITION_HEADER, str(f.partition).encode()),
                (OFFSET_HEADER, str(f.offset).encode()),
            ]
            self._producer.produce(self.topic, f.value, f.key, 0, headers=headers)
            kind = f.reason.split(":", 1)[0]
            self.reasons[kind] = self.reasons.get(kind, 0) + 1
            n += 1
        self.count += n
        self._producer.poll(0)
        return n

    def flush(self, timeout_s: float = 30.0) -> None:
        if self._producer.flush(timeout_s):
            raise LogStoreError(f"{self.topic}: dead letters not delivered within {timeout_s:.0f}s")

    def close(self) -> None:
        self.flush()
