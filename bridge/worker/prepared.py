"""Durable record of what each bucket prepared for a barrier.

A bucket that passes marker N flushes its memtable (files written, not yet
visible) and records the resulting commit messages here, as
``<table dir>/_prepared/<N>/bucket-<B>.json``. The table's committer commits
snapshot N once every bucket's file for N exists. The file is published by an
atomic rename, so a reader sees a whole record or none; a bucket that prepares
N again (after a crash or rebalance) replaces it with an equivalent record,
because both cover exactly the rows between markers N-1 and N.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow.fs as pafs

from bridge.worker.errors import PreparedRecordError
from filestore.io.fileio import has_directories

PREPARED_DIR = "_prepared"


@dataclass
class PreparedRecord:
    """What bucket ``bucket`` prepared for barrier ``barrier``."""

    barrier: int
    bucket: int
    next_offset: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    record_count: int = 0
    writer: str = ""
    written_ms: int = 0
    truncated: bool = False  # a truncate record passed in this barrier

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.__dict__)

    @classmethod
    def from_bytes(cls, data: bytes) -> PreparedRecord:
        try:
            return cls(**orjson.loads(data))
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise PreparedRecordError(f"unreadable prepared record: {exc}") from exc


class PreparedStore:
    """The ``_prepared`` directory of one table on any pyarrow filesystem."""

    def __init__(self, fs: pafs.FileSystem, table_dir: str) -> None:
        self.fs = fs
        self.root = f"{table_dir.rstrip('/')}/{PREPARED_DIR}"

    def _path(self, barrier: int, bucket: int) -> str:
        return f"{self.root}/{barrier}/bucket-{bucket}.json"

    def put(self, record: PreparedRecord) -> None:
        if not record.written_ms:
            record.written_ms = int(time.time() * 1000)
        final = self._path(record.barrier, record.bucket)
        if not has_directories(self.fs):
            # an object store publishes the whole object at once when it is closed
            with self.fs.open_output_stream(final) as out:
                out.write(record.to_bytes())
            return
        tmp = f"{final}.{uuid.uuid4().hex}.tmp"
        self.fs.create_dir(f"{self.root}/{record.barrier}", recursive=True)
        with self.fs.open_output_stream(tmp) as out:
            out.write(record.to_bytes())
        # rename publishes the whole record at once (atomic on POSIX and HDFS)
        self.fs.move(tmp, final)

    def get(self, barrier: int, bucket: int) -> PreparedRecord:
        with self.fs.open_input_stream(self._path(barrier, bucket)) as src:
            return PreparedRecord.from_bytes(src.read())

    def barriers(self) -> dict[int, set[int]]:
        """barrier -> buckets whose prepared record for it is published.

        A barrier directory emptied by :meth:`discard_bucket` is listed with no
        buckets, so the committer removes it once the barrier is committed instead
        of listing it on every poll forever.
        """
        found: dict[int, set[int]] = {}
        selector = pafs.FileSelector(self.root, allow_not_found=True, recursive=True)
        for info in self.fs.get_file_info(selector):
            if info.type == pafs.FileType.Directory and info.base_name.isdigit():
                found.setdefault(int(info.base_name), set())
                continue
            if info.type != pafs.FileType.File or not info.base_name.endswith(".json"):
                continue
            parent = info.path.rsplit("/", 2)[-2]
            name = info.base_name.removesuffix(".json")
            if not (parent.isdigit() and name.startswith("bucket-")):
                continue
            found.setdefault(int(parent), set()).add(int(name.removeprefix("bucket-")))
        return found

    def discard_bucket(self, bucket: int) -> int:
        """Delete every record of ``bucket`` (its new owner redoes them); returns how many."""
        return self.discard_buckets([bucket])

    def discard_buckets(self, buckets: Iterable[int]) -> int:
        """Delete every record of these buckets; returns how many. One listing for all
        (on S3 a listing is a request per thousand keys; a worker taking over a table
        discards every bucket it takes)."""
        gone = set(buckets)
        n = 0
        for barrier, found in self.barriers().items():
            for bucket in sorted(found & gone):
                with contextlib.suppress(FileNotFoundError, OSError):
                    self.fs.delete_file(self._path(barrier, bucket))
                    n += 1
        return n

    def drop(self, barrier: int) -> None:
        # another committer may have removed it already
        with contextlib.suppress(FileNotFoundError, OSError):
            self.fs.delete_dir(f"{self.root}/{barrier}")
