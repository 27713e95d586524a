"""Decoded data files kept in memory for a long-lived writer's lookups.

A commit that stores its changelog (``changelog-producer=auto``) or writes deletion
vectors looks up the old rows of the keys it touches in the bucket's live files, and so
does a compaction with ``changelog-producer=lookup``. Read from disk each time, that is
a read of every touched bucket per commit: a cost that grows with the table, not with
the change. Data files never change once written (their names are unique), so a table
handle that commits again and again (the worker's, a Python session's) keeps the files
it wrote or looked up, decoded, up to ``lookup.cache-max-memory-size`` (least recently
used out first), as Paimon's lookup changelog producer keeps its local lookup files.
A commit through the handle drops the files it removed (a compaction's inputs, an
overwrite's) and, when it read the table's live files, every other file kept that is
not live (removed by another handle: another process's compaction) but those the handle
wrote for a commit still to come. What the cache holds follows the live files, not the
budget.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Iterable

import pyarrow as pa


class FileCache:
    """Decoded files by path, within a byte budget; safe to share between threads."""

    def __init__(self) -> None:
        self._files: OrderedDict[str, pa.Table] = OrderedDict()
        # files this handle wrote that no commit it saw has published yet: not live, and
        # not dead either (the commit that publishes them may come after another)
        self._unpublished: set[str] = set()
        self._lock = threading.Lock()
        self.nbytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._files)

    def get(self, path: str) -> pa.Table | None:
        with self._lock:
            table = self._files.get(path)
            if table is None:
                self.misses += 1
                return None
            self._files.move_to_end(path)
            self.hits += 1
            return table

    def holds(self, path: str) -> bool:
        """Whether ``path`` is kept (counts neither a hit nor a miss)."""
        with self._lock:
            return path in self._files

    def paths(self) -> list[str]:
        """The files kept, least recently used first."""
        with self._lock:
            return list(self._files)

    def put(self, path: str, table: pa.Table, budget: int, *, written: bool = False) -> None:
        """Keep ``table`` as the content of ``path``, dropping the least recently used
        files beyond ``budget`` bytes (a file larger than the budget is not kept).
        ``written``: the handle has just written the file, for a commit still to come."""
        size = table.nbytes
        with self._lock:
            if path in self._files or size > budget:
                return
            self._files[path] = table
            self.nbytes += size
            if written:
                self._unpublished.add(path)
            while self.nbytes > budget:
                self._drop(next(iter(self._files)))

    def _drop(self, path: str) -> None:
        self.nbytes -= self._files.pop(path).nbytes
        self._unpublished.discard(path)

    def discard(self, paths: Iterable[str]) -> None:
        """Forget ``paths``: files a commit removed from the table are never looked up
        again, and kept they would hold the budget until it evicts them (a busy table's
        compactions fill any budget with dead files)."""
        with self._lock:
            for path in paths:
                if path in self._files:
                    self._drop(path)

    def retain(self, live: Collection[str]) -> None:
        """Keep only the ``live`` files (all of the table's, at a snapshot just committed)
        and those written for a commit still to come: any other file kept is dead,
        whichever handle's commit removed it."""
        with self._lock:
            self._unpublished.difference_update(live)
            for path in [p for p in self._files if p not in live]:
                if path not in self._unpublished:
                    self._drop(path)

    def clear(self) -> None:
        with self._lock:
            self._files.clear()
            self._unpublished.clear()
            self.nbytes = 0
