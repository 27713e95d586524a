"""The long-running commands' heap: out of the garbage collector's way, and Arrow's freed
memory given back.

Python's full collection walks every tracked object. After start-up those are mostly
objects that live as long as the process (the modules, classes and caches of pyarrow,
polars, Faust). Each consumed batch of Kafka messages (20k tracked objects that outlive
the young generations) moves the collector towards its next full walk: in `dts ingest`
one ran every ~100k records, 0.33-0.38 s of CPU per million records on a quiet machine
and 15-19% of the copy's CPU on a busy one (each walk slower). Frozen, a walk sees only
what the work allocated since start-up: 0.06-0.08 s per million. Frozen objects are
still freed by their reference counts.

Arrow's default allocator in pyarrow 26 is mimalloc, which keeps pages a thread freed
until that thread allocates again. The worker holds 2-4 MB in Arrow between flushes, yet
its RSS stepped up once an hour-long run by 10-30 MB (soak runs 5-11), all of it in
mimalloc's reservation (57-74 MB resident before, 82-101 after). jemalloc, as Arrow
builds it, returns freed pages after a second by a thread of its own.

Arrow reads its choice of pool (``ARROW_DEFAULT_MEMORY_POOL``) once, when pyarrow loads;
chosen later from Python (``pa.set_memory_pool``) it moves what pyarrow's calls allocate
but not what Arrow's C++ takes from its own default: Parquet's writer does (soak run 12,
chosen that way: the worker's RSS grew 11.5 MB in the judged 40 minutes against runs 10
and 11's 20.6 and 26.1, but mimalloc still held 26-33 MB, 47 from minute 55; a 100k-row
write left 8.5 MB in it). Chosen before pyarrow loads, nothing reaches mimalloc.
"""

from __future__ import annotations

import gc
from collections.abc import MutableMapping

#: Arrow's choice of pool, read once when pyarrow loads
ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"


def freeze_start_up_objects() -> None:
    """Call once start-up is done, before the work loop."""
    gc.collect()  # what start-up left as garbage is freed, not frozen
    gc.freeze()


def return_freed_arrow_memory(environ: MutableMapping[str, str]) -> None:
    """Arrow allocates from jemalloc in the processes started with ``environ``: this one
    if pyarrow has not loaded yet (``bridge.__main__`` calls it first), and those it
    starts. A pool the user named there stands."""
    environ.setdefault(ARROW_POOL_ENV, "jemalloc")
