"""`dts meta serve --tls-cert/--tls-key` as a real subprocess, with certificates made at test
time: the CA, a 127.0.0.1/localhost certificate and its key (the ones the broker's secured
mode makes). Shared by the MetaService's TLS tests and the Spark jobs' `meta.ca-file` test."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from logstore.localhost import write_private
from logstore.tls_files import ensure_tls_files

START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Certs:
    ca: Path
    cert: Path
    key: Path


def make_certs(directory: Path) -> Certs:
    """The CA and a 127.0.0.1/localhost certificate the broker's secured mode makes, its
    key split from the keystore into a 0600 file of its own (as a user would hold them)."""
    files = ensure_tls_files(directory / "tls")
    pem = files.keystore.read_text()
    end = "-----END PRIVATE KEY-----\n"
    key, chain = pem[: pem.index(end) + len(end)], pem[pem.index(end) + len(end) :]
    cert = directory / "meta-cert.pem"
    cert.write_text(chain)
    return Certs(files.ca, cert, write_private(directory / "meta-key.pem", key))


@contextmanager
def serve_tls(warehouse: Path, certs: Certs, token: str) -> Iterator[str]:
    """A TLS MetaService with ``token``; its https:// address, from its first line. On exit
    it is stopped (SIGINT, by its PID) and must have exited cleanly without showing the token."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge", "meta", "serve", "--port", "0",
         "--warehouse", str(warehouse), "--tls-cert", str(certs.cert),
         "--tls-key", str(certs.key)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "DTS_META_TOKEN": token},
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
    assert token not in "".join(output)
