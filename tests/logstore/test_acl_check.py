"""The worker's ACL check at start is a check, not the work: a cluster too busy to
answer it in time lets the start go on (with a warning); a definite error still stops
it. (A lacking ACL through a real secured broker: tests/bridge/worker/test_worker_secured.py.)"""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from logstore import acls
from logstore.errors import NotAuthorizedError
from logstore.localhost import free_port


def _check_raising(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    def missing(*args: Any, **kwargs: Any) -> list[acls.Acl]:
        raise exc

    monkeypatch.setattr(acls, "missing_acls", missing)
    # no broker behind it: the admin client connects lazily, the check is what fails
    acls.require_acls(f"127.0.0.1:{free_port()}", "dts worker", {"t": ("READ",)}, None)


@pytest.mark.parametrize(
    "unanswered",
    [
        concurrent.futures.TimeoutError(),
        KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed while waiting for response")),
        KafkaException(KafkaError(KafkaError.REQUEST_TIMED_OUT)),
    ],
)
def test_an_unanswered_check_lets_the_start_go_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, unanswered: BaseException
) -> None:
    _check_raising(monkeypatch, unanswered)
    assert "dts worker: Kafka did not answer the ACL check within 15 s" in caplog.text
    assert "()" not in caplog.text, "the warning names what went unanswered"


def test_a_definite_error_still_stops_it(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(KafkaException):
        _check_raising(monkeypatch, KafkaException(KafkaError(KafkaError._SSL)))


def test_a_lacking_acl_still_stops_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(acls, "missing_acls", lambda *a: [acls.Acl("Topic", "t", "READ")])
    with pytest.raises(NotAuthorizedError, match="cannot start: Kafka does not allow"):
        acls.require_acls(f"127.0.0.1:{free_port()}", "dts worker", {"t": ("READ",)}, None)
