"""The process's FileStore threads: one pool, one thread per core, shared by every read
and commit that decodes files in parallel.

Why one pool for the process, kept alive, rather than a pool per call:

- A read started a pool of its own and ended it: two thread starts and ends a read, about
  6 ms on a busy core (more than a cached lookup of a few keys costs).
- polars counts what it allocates per thread and adds a thread's count to its process
  total only in steps (``POLARS_OOC_DRIFT_THRESHOLD``): what an ended thread had not
  added is lost, and the total drifted up with the ended threads. The soak's probe (a
  read a second, a pool a read) made polars believe after ~35 minutes that its memory
  budget was spent: it started its out-of-core pressure thread (``polars-ooc-decay``,
  runs 7 and 8 at 2,100 s and 2,072 s) and the probe's CPU rose by half, flat after
  (0.09 to 0.14 cores in runs 7 and 8; the same minute in runs 2 and 4-6). Reading the
  soak's tables in a loop with ``POLARS_OOC_MEMORY_BUDGET_MB=256``: with a pool a read,
  that thread came within 10 s (by loop 70, 143 and 247 at 512, 1,024 and 2,048 MB: the
  drift grows with the reads) and a loop then cost 2.4 times the CPU; with this pool,
  not in 3,700 loops.

Work submitted from one of the pool's own threads runs in that thread: a task that
waited on tasks queued behind it would wait for ever once every thread did.

Polars' Parquet reads also take one of a thread per core's *decode slots*
(``decode_slot``), whichever thread calls them, and polars' file I/O threads are bounded
where polars reads the bound (``bound_polars_io_threads``). Polars reads a call's files in
threads of its own (tokio's blocking pool), about as many as the files up to 6-12, and
keeps every thread it started alive as long as it is used again within 10 s: under steady
reads the pool is the most file reads ever in flight at once, a high-water mark. The
slots alone bounded it to about 10 threads a core (sixteen threads reading sixteen files
each kept 83 and 145 without them, 14 and 15 with them) but it still stepped up for an
hour: the soak's probe went 11 -> 26 in run 18 and failed its threads series. Those
threads only open and read local files (decoding runs in polars' own pool), so two a
decode slot are enough: eight threads reading 64 files each ten times took 0.60 s with
the pool at 4 threads, 0.64 s at polars' default 512 (17 threads kept).
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

_T = TypeVar("_T")
_R = TypeVar("_R")

#: the pool's threads and the decode slots: one a core
_CORES = os.cpu_count() or 1
#: polars' bound on its blocking (file I/O) threads, read once, when its runtime starts
POLARS_IO_THREADS_ENV = "POLARS_MAX_BLOCKING_THREAD_COUNT"
#: file I/O threads polars may keep for each decode slot
IO_THREADS_PER_SLOT = 2

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_local = threading.local()
_slots = threading.BoundedSemaphore(_CORES)


def parallel_map(fn: Callable[[_T], _R], items: Iterable[_T]) -> list[_R]:
    """``fn`` of each item, in order: in the pool when there are several and this is not
    one of its threads, else here."""
    todo = list(items)
    if len(todo) <= 1 or getattr(_local, "in_pool", False):
        return [fn(x) for x in todo]
    return list(_shared_pool().map(fn, todo))


@contextmanager
def decode_slot() -> Iterator[None]:
    """Hold one of the process's decode slots (a core's) while polars reads files."""
    with _slots:
        yield


def bound_polars_io_threads(environ: MutableMapping[str, str]) -> None:
    """Bound polars' file I/O threads to two a decode slot in the processes that read with
    ``environ`` (this one and those it starts), unless a bound is named there.

    Polars reads the bound once, when its runtime starts at the first file read, so this
    runs when this module loads: before any read of dts's. When the bound is reached,
    polars warns once that it "may indicate a deadlock"; at dts's bound it means only
    that every I/O thread is busy (a file read always ends), so that warning is not
    shown; a bound of the user's own keeps it.
    """
    bound = str(IO_THREADS_PER_SLOT * _CORES)
    environ.setdefault(POLARS_IO_THREADS_ENV, bound)
    warnings.filterwarnings("ignore", message=rf"{POLARS_IO_THREADS_ENV} reached \({bound}\)")


def _shared_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_CORES, thread_name_prefix="filestore", initializer=_mark)
        return _pool


def _mark() -> None:
    _local.in_pool = True


def _forget_after_fork() -> None:
    """A forked child has none of its parent's threads: it starts a pool of its own, and
    its own slots (a slot held by a parent's thread would never be given back)."""
    global _pool, _lock, _slots
    _pool, _lock = None, threading.Lock()
    _slots = threading.BoundedSemaphore(_CORES)


os.register_at_fork(after_in_child=_forget_after_fork)
bound_polars_io_threads(os.environ)
