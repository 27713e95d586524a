"""The secured broker's settings, users and certificates, without starting a broker."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from logstore.broker_security import BrokerSecurity
from logstore.errors import BrokerStartError
from logstore.tls_files import ensure_tls_files


def test_passwords_are_kept_with_the_data_and_never_shown(tmp_path: Path) -> None:
    first = BrokerSecurity.kept_in(tmp_path, "app")
    again = BrokerSecurity.kept_in(tmp_path, "app")
    assert dict(first.users) == dict(again.users) and list(first.users) == ["admin", "app"]
    assert oct((tmp_path / "scram-users.properties").stat().st_mode & 0o777) == "0o600"
    for password in first.users.values():
        assert password not in repr(first)
        assert first.redact(f"bad [name=x,password={password}]") == "bad [name=x,password=***]"
    with pytest.raises(BrokerStartError, match=r"\['other'\] are not in"):
        BrokerSecurity.kept_in(tmp_path, "app", "other")


def test_names_and_passwords_the_storage_tool_cannot_take_are_refused() -> None:
    with pytest.raises(BrokerStartError, match="user 'bob'") as e:
        BrokerSecurity({"bob": "pa,ss]word"})
    assert "pa,ss]word" not in str(e.value)


def test_the_broker_certificate_verifies_against_the_ca_for_127_0_0_1(tmp_path: Path) -> None:
    files = ensure_tls_files(tmp_path / "tls")
    assert ensure_tls_files(tmp_path / "tls") == files  # made once, then kept
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(files.keystore)  # key and chain in one PEM file, as Kafka reads it
    client = ssl.create_default_context(cafile=files.ca)
    assert client.check_hostname and client.verify_mode == ssl.CERT_REQUIRED
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            with server.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            client.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            assert tls.getpeercert()["subject"] == ((("commonName", "dts embedded broker"),),)
            tls.send(b"x")
        t.join(timeout=10)


def test_the_compose_clusters_certificate_names_its_nodes(tmp_path: Path) -> None:
    """`python -m logstore.tls_files DIR HOST...`, as docker-compose.cluster-secured.yml
    runs it: the nodes' service names beside localhost and 127.0.0.1."""
    from cryptography import x509

    cmd = [sys.executable, "-m", "logstore.tls_files", str(tmp_path / "tls"), "kafka", "kafka-2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    pem = (tmp_path / "tls" / "broker-keystore.pem").read_bytes()
    cert = x509.load_pem_x509_certificates(pem)[0]  # the key comes first, then the chain
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost", "kafka", "kafka-2"]
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
