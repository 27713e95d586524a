"""moto's S3 server as a process on 127.0.0.1, for warehouses on S3 in tests.

A process of its own rather than a thread of the test: the workers, the test and moto
then do not share one interpreter lock, and the server is stopped by its PID.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from logstore.localhost import LOOPBACK, free_port

#: what pyarrow, obstore and every process the tests start need to reach moto
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@dataclass
class MotoS3:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def query(self) -> str:
        """The URI query that points pyarrow's S3 filesystem at this server."""
        return f"endpoint_override={LOOPBACK}:{self.port}&scheme=http&region=us-east-1"

    def warehouse(self, bucket: str, prefix: str) -> str:
        """``s3://<bucket>/<prefix>?<query>``, the bucket created if absent."""
        fs, _ = pafs.FileSystem.from_uri(f"s3://{bucket}?{self.query}&allow_bucket_creation=true")
        fs.create_dir(bucket)
        return f"s3://{bucket}/{prefix}?{self.query}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)


def start_moto(log_dir: Path, timeout_s: float = 60.0) -> MotoS3:
    """Start moto's S3 server; returns once it answers. Set ``CREDENTIALS`` in the
    environment of whatever reaches it."""
    port = free_port()
    log_path = log_dir / f"moto-{port}.log"
    cmd = [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(port)]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **CREDENTIALS}
        )
    server = MotoS3(proc, port, log_path)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(f"http://{LOOPBACK}:{port}/", timeout=1).read()
            return server
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise AssertionError(
                    f"moto's S3 server did not start:\n{log_path.read_text()}"
                ) from None
            time.sleep(0.1)
