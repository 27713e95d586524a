"""Arrow allocates from jemalloc in dts's processes unless the user named a pool; chosen
before pyarrow loads, Parquet's writer leaves mimalloc too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.arrow_pool import ARROW_POOL_ENV, python_worker_conf


@pytest.mark.parametrize(("chosen", "pool"), [(None, "jemalloc"), ("system", "system")])
def test_arrow_allocates_from_jemalloc_unless_the_user_chose_a_pool(
    chosen: str | None, pool: str, tmp_path: Path
) -> None:
    # a process of its own: Arrow reads the pool once a process, and this one's is pytest's
    env = {k: v for k, v in os.environ.items() if k != ARROW_POOL_ENV}
    if chosen is not None:
        env[ARROW_POOL_ENV] = chosen
    script = (
        "import os, sys\n"
        "from bridge.arrow_pool import return_freed_arrow_memory\n"
        "return_freed_arrow_memory(os.environ)\n"
        "import pyarrow as pa, pyarrow.parquet as pq\n"
        "pq.write_table(pa.table({'a': list(range(100_000))}), sys.argv[1])\n"
        "print(pa.default_memory_pool().backend_name, pa.mimalloc_memory_pool().max_memory())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "a.parquet")],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    # Parquet's writer allocates from Arrow's C++ default too: nothing of it in mimalloc
    assert out.stdout.split() == [pool, "0"]


def test_spark_python_workers_get_the_callers_pool_or_jemalloc() -> None:
    key = f"spark.executorEnv.{ARROW_POOL_ENV}"
    assert python_worker_conf({}) == {key: "jemalloc"}
    assert python_worker_conf({ARROW_POOL_ENV: "system"}) == {key: "system"}
