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

Choosing the pool from Python moves what pyarrow's calls allocate (arrays, reads,
compute), not what Arrow's C++ takes from its own default: Parquet's writer does (8.5 MB
of a 100k-row write stayed in mimalloc, measured). Soak run 12 with this choice: the
worker's RSS grew 11.5 MB in the judged 40 minutes (runs 10 and 11: 20.6 and 26.1),
mimalloc's part 26-33 MB, 47 from minute 55. Only ``ARROW_DEFAULT_MEMORY_POOL`` set
before pyarrow loads moves the writer too.
"""

from __future__ import annotations

import gc
import os

import pyarrow as pa


def freeze_start_up_objects() -> None:
    """Call once start-up is done, before the work loop."""
    gc.collect()  # what start-up left as garbage is freed, not frozen
    gc.freeze()


def return_freed_arrow_memory() -> None:
    """Arrow allocates from jemalloc in this process, unless the user chose Arrow's pool
    (``ARROW_DEFAULT_MEMORY_POOL``) or this pyarrow was built without it."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:
        return
    pa.set_memory_pool(pool)
