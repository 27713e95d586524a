"""Which client errors a watermark query asks again through (a broker failover), and
which it reports at once."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from logstore import watermarks
from logstore.kafka_failures import is_transient
from logstore.watermarks import watermark


@pytest.mark.parametrize(
    ("code", "transient"),
    [
        (KafkaError._TIMED_OUT, True),  # the old leader does not answer
        (KafkaError._DESTROY_BROKER, True),  # its handle went as the cluster changed
        (KafkaError.NOT_LEADER_FOR_PARTITION, True),
        (KafkaError.LEADER_NOT_AVAILABLE, True),
        (KafkaError.OFFSET_NOT_AVAILABLE, True),  # a new leader's high watermark lags
        (KafkaError.FENCED_LEADER_EPOCH, True),
        (KafkaError.UNKNOWN_LEADER_EPOCH, True),
        (KafkaError._ALL_BROKERS_DOWN, False),  # nothing answers: say so now
        (KafkaError.UNKNOWN_TOPIC_OR_PART, False),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, False),
    ],
)
def test_transient_errors(code: int, transient: bool) -> None:
    assert is_transient(KafkaException(KafkaError(code))) is transient


class _Flaky:
    """A consumer whose first answers are a failover's."""

    def __init__(self, failures: list[int]) -> None:
        self.failures = failures
        self.calls = 0
        self.refreshed = 0

    def get_watermark_offsets(self, tp: object, timeout: float) -> tuple[int, int]:
        self.calls += 1
        if self.failures:
            raise KafkaException(KafkaError(self.failures.pop(0)))
        return (3, 9)

    def list_topics(self, topic: str, timeout: float) -> object:
        self.refreshed += 1
        return object()


def test_a_query_asks_again_through_a_failover_and_not_past_a_definite_error() -> None:
    flaky = _Flaky(
        [
            KafkaError._TIMED_OUT,
            KafkaError.NOT_LEADER_FOR_PARTITION,
            KafkaError.OFFSET_NOT_AVAILABLE,
        ]
    )
    assert watermark(flaky, "t", 0) == (3, 9) and flaky.calls == 4
    with pytest.raises(KafkaException):
        watermark(_Flaky([KafkaError.UNKNOWN_TOPIC_OR_PART]), "t", 0)
    with pytest.raises(KafkaException):  # still failing when the failover window closes
        watermark(_Flaky([KafkaError._TIMED_OUT] * 100), "t", 0, failover_s=0.3)


def test_a_partition_missing_from_the_clients_metadata_is_asked_again_for_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Right after a failover a metadata answer can leave a partition out: the query asks
    again (it once killed a Spark stream in the cluster test), but a partition that stays
    unknown is reported after STALE_METADATA_S from the first time it was missing, not
    after the whole failover window."""
    flaky = _Flaky([KafkaError._UNKNOWN_PARTITION] * 2)
    assert watermark(flaky, "t", 0) == (3, 9) and flaky.calls == 3
    assert flaky.refreshed == 2  # each retry asked for the topic's metadata again
    monkeypatch.setattr(watermarks, "STALE_METADATA_S", 0.3)
    start = time.monotonic()
    with pytest.raises(KafkaException):
        watermark(_Flaky([KafkaError._UNKNOWN_PARTITION] * 1000), "t", 0)
    assert time.monotonic() - start < 5  # not FAILOVER_S (120 s)


def test_the_stale_window_starts_when_the_partition_first_goes_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A query that first waited through timeouts (a leader's election) still gives a
    partition missing after that its whole STALE_METADATA_S."""
    monkeypatch.setattr(watermarks, "STALE_METADATA_S", 0.5)
    monkeypatch.setattr(watermarks, "time", _Clock())  # the module's clock only
    failures = [KafkaError._TIMED_OUT] * 5 + [KafkaError._UNKNOWN_PARTITION] * 2
    flaky = _Flaky(failures)  # 1 s of timeouts, then 0.4 s of a missing partition
    assert watermark(flaky, "t", 0) == (3, 9)


class _Clock:
    """`time` for the watermarks module: sleeping advances it, nothing waits."""

    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s
