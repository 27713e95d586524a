"""The block the demo prints once it only keeps running: readers (the demo's tests, a
user's script) wait for its last line, ``EXPLORE_END``, and parse the commands above it,
so neither may be cut by the terminal's width however long the paths are (official CI's
paths wrapped the last line once the tests waited for it)."""

from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console

from bridge.demo.report import EXPLORE_END, print_exploration


def test_the_last_line_and_the_commands_stay_whole_at_any_path_length() -> None:
    deep = "/tmp/" + "/".join(["a-rather-long-directory-name"] * 8)
    out = io.StringIO()
    console = Console(file=out, width=80, color_system=None)
    addresses = {
        "MetaService": "https://127.0.0.1:40001",
        "worker /status": "http://127.0.0.1:40002/status",
        "worker /metrics": "http://127.0.0.1:40002/metrics",
    }
    exports = f"export DTS_KAFKA_CONFIG={deep}/p DTS_META_CA_FILE={deep}/ca.pem DTS_META_TOKEN=x"
    print_exploration(console, addresses, f"{deep}/warehouse", Path(deep) / "logs", exports)
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    assert lines[-1].endswith(EXPLORE_END) and lines[-1].startswith(f"warehouse {deep}/")
    assert re.search(r"export DTS_KAFKA_CONFIG=(\S+) DTS_META_CA_FILE=(\S+) ", out.getvalue())
    assert f"dts table scan demo.customer_totals --warehouse {deep}/warehouse" in out.getvalue()
