"""A local Prometheus server on 127.0.0.1: started from a config, asked over its HTTP API.

The demo records its metrics history with one (``bridge.demo.prometheus_history``) and the
monitoring tests evaluate the alert rules in one; both start it here. The config is
written as JSON, which Prometheus reads as YAML.

Imports within bridge: bridge.errors.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from bridge.errors import PrometheusUnavailable
from logstore.localhost import free_port, stop_process

START_TIMEOUT_S = 30.0


class PrometheusServer:
    """``prometheus`` with ``config`` (a prometheus.yml as a dict), its data in ``work_dir``."""

    def __init__(self, config: dict[str, Any], work_dir: Path, binary: str | None = None) -> None:
        found = binary or shutil.which("prometheus")
        if found is None:
            raise PrometheusUnavailable(
                "no prometheus on PATH (Debian: apt-get install prometheus)"
            )
        self.binary = found
        self.config = config
        self.work_dir = work_dir
        self.log_path = work_dir / "prometheus.log"
        self.url = ""
        self.client = httpx.Client(timeout=10)
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PrometheusServer:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "prometheus.yml"
        config.write_text(json.dumps(self.config, indent=2))
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                [self.binary, f"--config.file={config}",
                 f"--storage.tsdb.path={self.work_dir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.wait_until(self._ready, "did not start")
        return self

    def wait_until(
        self, condition: Callable[[], bool], failure: str, timeout_s: float = START_TIMEOUT_S
    ) -> None:
        """Poll ``condition`` until true; if the server exits or time runs out, stop it and
        raise ``PrometheusUnavailable("prometheus <failure>: <why>")``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if condition():
                    return
            except httpx.HTTPError:
                pass
            code = None if self._proc is None else self._proc.poll()
            if code is not None or self._proc is None or time.monotonic() > deadline:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                self.stop()
                why = f"it exited with {code}" if code is not None else f"{timeout_s:.0f}s passed"
                raise PrometheusUnavailable(
                    f"prometheus {failure}: {why}; see {self.log_path}:\n{tail}"
                )
            time.sleep(0.2)

    def _ready(self) -> bool:
        return self.client.get(f"{self.url}/-/ready", timeout=2).status_code == 200

    def api(self, path: str, **params: Any) -> Any:
        """``GET /api/v1/<path>``'s ``data``; PrometheusUnavailable if it does not answer."""
        try:
            response = self.client.get(f"{self.url}/api/v1/{path}", params=params)
            response.raise_for_status()
            return response.json()["data"]
        except (httpx.HTTPError, KeyError, ValueError) as e:
            raise PrometheusUnavailable(f"prometheus at {self.url} did not answer: {e}") from e

    def query(self, expr: str) -> dict[str, Any]:
        """Evaluate ``expr`` now; the API's whole JSON (status, data or error)."""
        result: dict[str, Any] = self.client.get(
            f"{self.url}/api/v1/query", params={"query": expr}
        ).json()
        return result

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        stop_process(proc, timeout_s=10)
        self.client.close()

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
