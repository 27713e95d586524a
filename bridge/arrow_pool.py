"""Arrow's memory pool in every process that runs dts's code: jemalloc.

pyarrow 26's default, mimalloc, keeps the pages a thread freed until that thread
allocates again; jemalloc, as Arrow builds it, returns them after a second. Measured in
soak runs 5-13: the worker's RSS stepped up 10-30 MB an hour, all in mimalloc's
reservation; in run 15, each of Spark's two streaming-sink Python workers (dts's sink,
writing Parquet) held 113 MB resident in it. Arrow reads its choice
(``ARROW_DEFAULT_MEMORY_POOL``) once, when pyarrow loads, so it is made where a process
starts: ``bridge.__main__`` for ``dts``, Spark's Python workers by the session's
``spark.executorEnv`` (``python_worker_conf``). A pool the user named stands.

Imports within bridge: nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

#: Arrow's choice of pool, read once when pyarrow loads
ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"
#: the pool dts's processes use unless the user named one
ARROW_POOL = "jemalloc"


def return_freed_arrow_memory(environ: MutableMapping[str, str]) -> None:
    """Arrow allocates from jemalloc in the processes started with ``environ``: this one
    if pyarrow has not loaded yet (``bridge.__main__`` calls it first), and those it
    starts. A pool the user named there stands."""
    environ.setdefault(ARROW_POOL_ENV, ARROW_POOL)


def python_worker_conf(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """A Spark session's settings that give its Python workers (dts's data source and sink
    run in them, on the driver's machine and on executors) this process's pool, or
    jemalloc."""
    return {f"spark.executorEnv.{ARROW_POOL_ENV}": environ.get(ARROW_POOL_ENV, ARROW_POOL)}
