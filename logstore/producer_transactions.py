"""librdkafka's transaction calls where they fall short of their contract: a call whose
timeout holds, and the error a failed transaction failed of (``logstore.transactions``
is the other kind: a source database's transactions)."""

from __future__ import annotations

import threading
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

#: how long the source offsets of a barrier may take to reach the group coordinator (a
#: coordinator failover included) before the writer gives up on its client
SEND_OFFSETS_S = 30.0


def send_offsets(
    producer: Producer, offsets: list[TopicPartition], group_metadata: Any, name: str
) -> bool:
    """``send_offsets_to_transaction`` with a timeout that holds: librdkafka ignores its own
    when the group coordinator's broker died (confluentinc/librdkafka#5456, #5511; seen in
    tests/bridge/worker/test_worker_kafka_cluster.py: hung for minutes after the node came
    back). False when the call did not return in time: the client is wedged in it, and
    nothing more may be asked of it. The call's own failure is raised."""
    done = threading.Event()
    failure: list[BaseException] = []

    def call() -> None:
        try:
            producer.send_offsets_to_transaction(offsets, group_metadata, SEND_OFFSETS_S)
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=call, name=name, daemon=True).start()
    if not done.wait(SEND_OFFSETS_S + 5):
        return False
    if failure:
        raise failure[0]
    return True


def transaction_cause(producer: Producer, exc: KafkaException) -> KafkaException:
    """What failed the open transaction, when a call in it says only ``_STATE``.

    librdkafka refuses a produce in a failed transaction with that bare code (hog run
    h11: a topic's refusal, learnt in the background after the rows were queued, surfaced
    at the barrier's markers as "Erroneous state"). A call that needs another state
    returns the transaction's own error instead, so ``begin_transaction`` is asked, which
    changes nothing in a failed transaction. Any other error is returned as it is."""
    err = exc.args[0] if exc.args else None
    if not isinstance(err, KafkaError) or err.code() != KafkaError._STATE:
        return exc
    try:
        producer.begin_transaction()  # in a failed transaction: refused, with the cause
    except KafkaException as found:
        cause = found.args[0] if found.args else None
        if isinstance(cause, KafkaError) and (cause.txn_requires_abort() or cause.fatal()):
            return found
    return exc
