"""Every fenced code block of README.md and docs/*.md runs as written.

- ```python blocks run with the venv's Python, ```bash / ```sh blocks with bash
  (``set -euo pipefail``), each in a fresh temporary directory with ``DTS_WAREHOUSE`` set
  to an empty warehouse there and ``.venv/bin`` first on ``PATH``. A block that mentions
  ``DTS_BOOTSTRAP`` also gets the session's embedded broker.
- Blocks in any other language (```text, ```console, ```json, ...) are shown, not run.
- A block that mentions ``SOURCE_DSN`` gets a fresh PostgreSQL (``wal_level=logical``) and
  up to ``SOURCE_BLOCK_TIMEOUT_S``: it starts Kafka Connect.
- A block whose first line is ``# no-run: <reason>`` is skipped; the reason is mandatory.
- Every block names its language, so that nothing runnable is skipped by accident.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.bridge.spark.cluster import SparkCluster, spark_cluster
from tests.postgres import local_postgres

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUNNERS = {
    "python": [sys.executable],
    "bash": ["bash", "-euo", "pipefail"],
    "sh": ["bash", "-euo", "pipefail"],
}
BLOCK_TIMEOUT_S = 150
SOURCE_BLOCK_TIMEOUT_S = 360
_OPEN = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
_NO_RUN = re.compile(r"^\s*#\s*no-run\b:?\s*(?P<reason>.*)$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def no_run_reason(self) -> str | None:
        first = self.code.splitlines()[0] if self.code.strip() else ""
        match = _NO_RUN.match(first)
        return match["reason"].strip() if match else None


def extract_blocks(path: Path) -> list[Block]:
    """Fenced blocks of a Markdown file (``` or ~~~, closed by the same fence or longer)."""
    blocks: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        match = _OPEN.match(lines[i])
        if not match:
            i += 1
            continue
        fence, indent = match["fence"], len(match["indent"])
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not re.match(
            rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[j]
        ):
            body.append(lines[j][indent:] if lines[j][:indent].isspace() else lines[j])
            j += 1
        blocks.append(Block(path, i + 1, match["lang"].lower(), "\n".join(body) + "\n"))
        i = j + 1
    return blocks


ALL_BLOCKS = [b for path in DOCS for b in extract_blocks(path)]
RUNNABLE = [b for b in ALL_BLOCKS if b.lang in RUNNERS]


def test_docs_have_code_blocks() -> None:
    assert ALL_BLOCKS, "README.md and docs/*.md hold no code block: is the extractor broken?"


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=lambda b: b.id)
def test_every_block_names_its_language(block: Block) -> None:
    assert block.lang, (
        f"{block.id}: fence the block as ```python/```bash (run) or ```text/```console (shown)"
    )


def run_block(
    block: Block, tmp_path: Path, extra_env: dict[str, str], timeout_s: float = BLOCK_TIMEOUT_S
) -> tuple[int, str]:
    """Run ``block`` in ``tmp_path`` with a fresh warehouse; returns (exit code, output)."""
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    env = {
        **os.environ,
        "DTS_WAREHOUSE": str(warehouse),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
        "DTS_REPO": str(REPO),  # blocks that use repository files (examples/, monitoring/)
        "PYSPARK_PYTHON": sys.executable,
        **extra_env,
    }
    script = tmp_path / ("block.py" if block.lang == "python" else "block.sh")
    script.write_text(block.code)
    proc = subprocess.Popen(
        [*RUNNERS[block.lang], str(script)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # so a timeout ends everything the block started
    )
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"{block.id}: still running after {timeout_s}s:\n{output[-3000:]}")
    return proc.returncode, output


def _param(block: Block) -> Any:
    """A block that starts a Spark cluster, a PostgreSQL server or brokers of its own is slow."""
    heavy = any(s in block.code for s in ("SPARK_MASTER", "SOURCE_DSN", "dts broker "))
    return pytest.param(block, id=block.id, marks=[pytest.mark.slow] if heavy else [])


@pytest.fixture(scope="module")
def docs_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """deploy.md's cluster recipes run against a standalone cluster whose executors' Python
    has the dependencies but not the project: it arrives as the recipe ships it. One cluster
    for every such block (each is an application of its own, with its own warehouse)."""
    with spark_cluster(tmp_path_factory.mktemp("docs-spark-cluster")) as cluster:
        yield cluster


def _registered_apps(cluster: SparkCluster) -> int:
    return sum(log.read_text().count("Registered app") for log in cluster.logs.glob("*.log"))


@pytest.mark.parametrize("block", [_param(b) for b in RUNNABLE])
def test_code_block_runs(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    reason = block.no_run_reason
    if reason is not None:
        assert reason, f"{block.id}: `# no-run:` needs a reason after the colon"
        pytest.skip(f"no-run: {reason}")
    extra = {}
    if "DTS_BOOTSTRAP" in block.code:
        extra["DTS_BOOTSTRAP"] = request.getfixturevalue("broker").bootstrap
    with contextlib.ExitStack() as stack:
        if "SPARK_MASTER" in block.code:
            cluster: SparkCluster = request.getfixturevalue("docs_cluster")
            apps_before = _registered_apps(cluster)
            extra["SPARK_MASTER"] = cluster.master_url
            extra["PYSPARK_PYTHON"] = cluster.python
        timeout_s = BLOCK_TIMEOUT_S
        if "SOURCE_DSN" in block.code:
            extra["SOURCE_DSN"] = stack.enter_context(local_postgres(logical=True))
            timeout_s = SOURCE_BLOCK_TIMEOUT_S
        code, output = run_block(block, tmp_path, extra, timeout_s)
        assert code == 0, f"{block.id} exited {code}:\n{output[-3000:]}"
        if "SPARK_MASTER" in extra:  # the block's own application ran on the cluster
            assert _registered_apps(cluster) > apps_before, cluster.log_tail()


def test_runner_gives_blocks_a_warehouse_and_the_venv(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```python\nimport os, pathlib, sys\n"
        "assert pathlib.Path(os.environ['DTS_WAREHOUSE']).is_dir()\n"
        "import bridge, filestore, logstore\nprint('py ok')\n```\n"
        '```bash\ntest -d "$DTS_WAREHOUSE"\ndts --help >/dev/null\necho sh ok\n```\n'
        "```sh\nfalse\necho unreachable\n```\n"
    )
    py, sh, failing = extract_blocks(doc)
    results = []
    for i, block in enumerate((py, sh, failing)):
        (tmp_path / str(i)).mkdir()
        results.append(run_block(block, tmp_path / str(i), {}))
    assert results[0] == (0, "py ok\n")
    assert results[1] == (0, "sh ok\n")
    assert results[2][0] != 0 and "unreachable" not in results[2][1]


def test_no_run_marker_needs_a_reason(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("```python\n# no-run:\nprint(1)\n```\n\n~~~bash\n# no-run: needs S3\nls\n~~~\n")
    first, second = extract_blocks(doc)
    assert first.no_run_reason == ""  # present but empty: test_code_block_runs fails it
    assert second.no_run_reason == "needs S3"
    assert (first.lang, first.line, second.lang, second.line) == ("python", 1, "bash", 6)


def test_extractor_keeps_nested_fences_and_indentation(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("- item\n\n  ````text\n  ```python\n  x = 1\n  ```\n  ````\n")
    (block,) = extract_blocks(doc)
    assert block.lang == "text"
    assert block.code == "```python\nx = 1\n```\n"
