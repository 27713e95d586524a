"""`dts meta serve --tls-cert/--tls-key` as a real subprocess with certificates made at test
time: a client with the CA file works with its token as over http; one without it, or
a plain http:// one, is refused with an error saying what to set."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from bridge.cli import cli
from bridge.meta.client import MetaClient
from bridge.meta.errors import MetaTlsError
from logstore.localhost import write_private
from logstore.tls_files import ensure_tls_files

TOKEN = "jobs-token-for-tls-test"
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Certs:
    ca: Path
    cert: Path
    key: Path


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    """The CA and a 127.0.0.1/localhost certificate the broker's secured mode makes, its
    key split from the keystore into a 0600 file of its own (as a user would hold them)."""
    files = ensure_tls_files(tmp_path / "tls")
    pem = files.keystore.read_text()
    end = "-----END PRIVATE KEY-----\n"
    key, chain = pem[: pem.index(end) + len(end)], pem[pem.index(end) + len(end) :]
    cert = tmp_path / "meta-cert.pem"
    cert.write_text(chain)
    return Certs(files.ca, cert, write_private(tmp_path / "meta-key.pem", key))


@pytest.fixture
def https_url(warehouse: Path, certs: Certs) -> Iterator[str]:
    """A TLS MetaService with a token; its https:// address, from its first line."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge.cli", "meta", "serve", "--port", "0",
         "--warehouse", str(warehouse), "--tls-cert", str(certs.cert),
         "--tls-key", str(certs.key)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "DTS_META_TOKEN": TOKEN},
    )  # fmt: skip
    assert proc.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    output: list[str] = []

    def pump() -> None:  # a reader thread, so the wait for the first line has a deadline
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            lines.put(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        try:
            first = lines.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            raise AssertionError(f"no address within {START_TIMEOUT_S} s: {output}") from None
        m = re.search(r"listening on (https://127\.0\.0\.1:\d+)", first)
        assert m is not None, f"no https address printed: {first!r}"
        yield m.group(1)
    finally:
        proc.send_signal(signal.SIGINT)  # this process only, by its PID
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        reader.join(timeout=10)
    assert proc.returncode == 0, "".join(output)
    assert TOKEN not in "".join(output)


def test_a_client_with_the_ca_file_works_over_tls_with_its_token(
    https_url: str, certs: Certs
) -> None:
    with MetaClient(https_url, token=TOKEN, ca_file=str(certs.ca)) as client:
        assert client.health().auth == "bearer"
        client.register_job("worker", [], ["db.t"], job_id="w1")
        client.report_barrier("db.t", 1000, snapshot_id=1, job_id="w1")
        version = client.consistent_version(["db.t"])
        assert version.barrier == 1000
        assert {t.table: t.snapshot_id for t in version.tables} == {"db.t": 1}


def test_the_ca_file_comes_from_the_environment_like_the_token(
    https_url: str, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DTS_META_TOKEN", TOKEN)
    monkeypatch.setenv("DTS_META_CA_FILE", str(certs.ca))
    code, out = _dts("meta", "jobs", "list", "--url", https_url)
    assert code == 0, out


def test_a_client_without_the_ca_is_refused_naming_the_ca_option(https_url: str) -> None:
    with MetaClient(https_url, token=TOKEN) as client, pytest.raises(MetaTlsError) as err:
        client.health()
    assert "not trusted by the system trust store" in err.value.message
    assert "DTS_META_CA_FILE" in err.value.message


def test_a_plain_http_client_to_the_tls_port_is_refused(https_url: str) -> None:
    plain = https_url.replace("https://", "http://")
    with MetaClient(plain, token=TOKEN) as client, pytest.raises(MetaTlsError) as err:
        client.health()
    assert "use an https:// URL" in err.value.message


def test_a_missing_ca_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(MetaTlsError, match="DTS_META_CA_FILE"):
        MetaClient("https://127.0.0.1:1", ca_file=str(tmp_path / "absent.pem"))


def test_cert_and_key_go_together(certs: Certs, warehouse: Path) -> None:
    code, out = _dts("meta", "serve", "--warehouse", str(warehouse), "--tls-cert", str(certs.cert))
    assert code == 2 and "--tls-cert needs --tls-key" in out
    code, out = _dts("meta", "serve", "--warehouse", str(warehouse), "--tls-key", str(certs.key))
    assert code == 2 and "--tls-key needs --tls-cert" in out


def test_a_key_that_does_not_match_fails_before_the_address(
    certs: Certs, warehouse: Path, tmp_path: Path
) -> None:
    other = ensure_tls_files(tmp_path / "other")  # another CA, another key
    code, out = _dts(
        "meta", "serve", "--port", "0", "--warehouse", str(warehouse),
        "--tls-cert", str(certs.cert), "--tls-key", str(other.keystore),
    )  # fmt: skip
    assert code == 1 and "cannot serve TLS" in out and "listening" not in out
    assert "PRIVATE KEY" not in out


def _dts(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output
