"""Which Kafka client errors a broker failover causes: asked again (a reader) or by a new
client (a writer), they pass once the cluster has its leaders and coordinators back."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

# the broker's answers a failover causes; Kafka's protocol calls them retriable, but
# librdkafka's error objects do not all say so (``retriable()`` is False for them)
_TRANSIENT = {
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.BROKER_NOT_AVAILABLE,
    # a new leader whose high watermark has not caught up since its election (the
    # cluster test's Spark stream died of it right after the leader was killed)
    KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    # a transactional producer's: its partitions short of replicas or its coordinator moving
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.CONCURRENT_TRANSACTIONS,
    # a partition leader killed with the producer's batches in flight: the new leader never
    # saw some of them, so the next batch's sequence skips ahead (the three-broker bank,
    # h18); the transaction must be aborted and the producer's epoch bumped, which a new
    # writer's init_transactions does. The same for a producer state the new leader lost
    KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
    KafkaError.UNKNOWN_PRODUCER_ID,
}
# what a retry cannot cure, or what a failover of one node does not cause (no broker
# answers at all: the caller's own "unreachable" error says so at once)
_DEFINITE = {
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._INVALID_ARG,
    KafkaError._AUTHENTICATION,
    KafkaError._SSL,
    KafkaError._FATAL,
    KafkaError._NOT_IMPLEMENTED,
}


def is_transient(exc: KafkaException) -> bool:
    """Whether a client error is one a broker failover causes (ask again): the broker's
    retriable answers, and the client's local conditions (timed out, transport, a broker
    handle destroyed while the cluster changed, ...) but those that never pass."""
    err = exc.args[0] if exc.args else None
    if not isinstance(err, KafkaError):
        return False
    code = err.code()
    if code in _DEFINITE:
        return False
    return err.retriable() or code in _TRANSIENT or code < 0


def is_fenced(err: KafkaError) -> bool:
    """Whether another producer with the same transactional id took over."""
    fenced = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    return err.code() in fenced or "fenc" in str(err).lower()
