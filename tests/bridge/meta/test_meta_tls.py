"""`dts meta serve --tls-cert/--tls-key` as a real subprocess with certificates made at test
time: a client with the CA file works with its token as over http; one without it, or
a plain http:// one, is refused with an error saying what to set."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from bridge.cli import cli
from bridge.meta.client import MetaClient
from bridge.meta.errors import MetaTlsError
from logstore.tls_files import ensure_tls_files
from tests.bridge.meta.tls_service import Certs, make_certs, serve_tls

TOKEN = "jobs-token-for-tls-test"


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return make_certs(tmp_path)


@pytest.fixture
def https_url(warehouse: Path, certs: Certs) -> Iterator[str]:
    """A TLS MetaService with a token; its https:// address, from its first line."""
    with serve_tls(warehouse, certs, TOKEN) as url:
        yield url


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
