"""TLS certificates for the embedded broker's secured mode: a CA and a broker certificate.

Made with ``cryptography`` when the broker starts, written as PEM (Kafka 4.x reads PEM
key and trust stores, librdkafka and Python's ``ssl`` read the CA file), so a secured
broker needs neither keytool nor a password for its stores. The broker's certificate
names ``127.0.0.1`` and ``localhost``: clients keep hostname verification on.

For development and tests only: the CA's key is written beside its certificate and the
broker's key is not encrypted (the directory is the broker's own, mode 0700).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path
from typing import Any

from logstore.errors import BrokerStartError
from logstore.localhost import LOOPBACK, write_private

#: how long the certificates are valid: a broker started for a demo or a test run
VALID_DAYS = 30


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files of a secured broker."""

    #: the CA certificate clients verify the broker with (``ssl.ca.location``)
    ca: Path
    #: the broker's unencrypted PKCS#8 key followed by its certificate chain (Kafka's
    #: ``ssl.keystore.type=PEM`` file)
    keystore: Path


def ensure_tls_files(directory: Path, hosts: tuple[str, ...] = ()) -> TlsFiles:
    """The CA and broker certificate in ``directory``, made when absent (a restarted broker
    or another node of the cluster keeps the ones its clients already trust).

    ``hosts``: more DNS names the certificate holds beside ``localhost`` and 127.0.0.1 (the
    Kafka nodes of docker-compose.cluster-secured.yml, which clients reach by service name).
    """
    files = TlsFiles(directory / "ca.pem", directory / "broker-keystore.pem")
    if files.ca.is_file() and files.keystore.is_file():
        return files
    try:
        # the CLI's and the tests' dependency, not the LogStore's: only a secured broker needs it
        from cryptography import x509  # noqa: F401
    except ImportError as exc:
        raise BrokerStartError(
            "a secured broker makes its TLS certificates with the `cryptography` package: "
            "pip install cryptography (the `cli` extra has it)"
        ) from exc
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    ca_pem, ca_key_pem, keystore_pem = _make_certificates(hosts)
    write_private(directory / "ca-key.pem", ca_key_pem)
    write_private(files.keystore, keystore_pem)
    files.ca.write_bytes(ca_pem)  # written last: its presence means the set is complete
    return files


def _make_certificates(hosts: tuple[str, ...]) -> tuple[bytes, bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    # valid from a minute ago: a client whose clock is a little behind still accepts it
    start, end = now - datetime.timedelta(minutes=1), now + datetime.timedelta(days=VALID_DAYS)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def builder(subject: str, issuer: str, key: Any) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(name(issuer))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
        )

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_cert = (
        builder("dts embedded broker CA", "dts embedded broker CA", ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (
        builder("dts embedded broker", "dts embedded broker CA", key)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    *(x509.DNSName(h) for h in ("localhost", *hosts)),
                    x509.IPAddress(ip_address(LOOPBACK)),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM

    def pkcs8(k: Any) -> bytes:
        return bytes(
            k.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        )

    ca_pem = ca_cert.public_bytes(pem)
    return ca_pem, pkcs8(ca_key), pkcs8(key) + cert.public_bytes(pem) + ca_pem


if __name__ == "__main__":
    # `python -m logstore.tls_files DIR [HOST ...]`: the one-shot service of
    # docker-compose.cluster-secured.yml makes its nodes' certificates with this
    import sys

    if len(sys.argv) < 2:
        sys.exit("usage: python -m logstore.tls_files DIR [HOST ...]")
    made = ensure_tls_files(Path(sys.argv[1]), tuple(sys.argv[2:]))
    print(f"CA: {made.ca}\nkeystore: {made.keystore}")
