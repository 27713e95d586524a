"""``transaction_cause``: the error a failed transaction failed of, in place of the bare
``_STATE`` a produce in it gets (the real path: tests/bridge/worker/test_worker_secured.py,
a topic refusing the principal)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from logstore.producer_transactions import transaction_cause


class _Producer:
    """Answers ``begin_transaction`` as librdkafka does in one transaction state."""

    def __init__(self, refusal: KafkaError | None) -> None:
        self.refusal = refusal
        self.begun = 0

    def begin_transaction(self) -> None:
        self.begun += 1
        if self.refusal is not None:
            raise KafkaException(self.refusal)


STATE = KafkaException(KafkaError(KafkaError._STATE, "Erroneous state"))
REFUSED = KafkaError(
    KafkaError.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed", txn_requires_abort=True
)


def test_a_failed_transactions_own_error_replaces_the_bare_state_error() -> None:
    found = transaction_cause(_Producer(REFUSED), STATE)  # type: ignore[arg-type]
    assert found.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


@pytest.mark.parametrize(
    "answer",
    [KafkaError(KafkaError._STATE, "Operation not valid in state InTransaction"), None],
    ids=["transaction-sound", "no-transaction"],
)
def test_a_state_error_without_a_failed_transaction_is_kept(answer: KafkaError | None) -> None:
    assert transaction_cause(_Producer(answer), STATE) is STATE  # type: ignore[arg-type]


def test_any_other_error_is_kept_and_nothing_asked() -> None:
    other = KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, "Message timed out"))
    producer = _Producer(REFUSED)
    assert transaction_cause(producer, other) is other  # type: ignore[arg-type]
    assert producer.begun == 0
