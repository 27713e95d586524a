"""Ports for the servers dts starts: free, and out of the kernel's ephemeral range."""

from __future__ import annotations

import contextlib
import socket

import pytest

from logstore.errors import PortError
from logstore.localhost import EPHEMERAL_RANGE, LOOPBACK, PORTS_ENV, free_port, port_span


def test_ports_come_from_below_the_ephemeral_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PORTS_ENV, raising=False)
    span = port_span()
    if span is None:
        pytest.skip("this kernel does not say its ephemeral range")
    ephemeral_low = int(EPHEMERAL_RANGE.read_text().split()[0])
    low, high = span
    assert high == ephemeral_low - 1 and low < high
    ports = [free_port() for _ in range(50)]
    assert all(low <= p <= high for p in ports)
    assert len(set(ports)) == 50, "one process is never handed a port twice in a row"


def test_a_port_something_listens_on_is_never_handed_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with contextlib.closing(socket.socket()) as held:
        taken = free_port()
        held.bind((LOOPBACK, taken))
        held.listen()
        monkeypatch.setenv(PORTS_ENV, f"{taken}-{taken + 50}")
        got = {free_port() for _ in range(20)}
        assert taken not in got and all(taken < p <= taken + 50 for p in got)


def test_the_range_can_be_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORTS_ENV, "23000-23099")
    assert port_span() == (23000, 23099)
    assert 23000 <= free_port() <= 23099


@pytest.mark.parametrize("given", ["20000", "a-b", "30000-20000", "80-90"])
def test_a_bad_range_is_named(monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    monkeypatch.setenv(PORTS_ENV, given)
    with pytest.raises(PortError, match=PORTS_ENV):
        free_port()
