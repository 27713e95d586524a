"""Avro manifests (one entry per added or deleted data file) and manifest lists."""

from __future__ import annotations

import io
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro

from filestore.format.data_file import DATA_FILE_AVRO, DataFileMeta
from filestore.format.paths import TablePaths
from filestore.io.fileio import FileIO

ADD = 0
DELETE = 1

MANIFEST_ENTRY_AVRO = fastavro.parse_schema(
    {
        "type": "record",
        "name": "ManifestEntry",
        "namespace": "dts.filestore",
        "fields": [
            {"name": "kind", "type": "int"},  # 0 ADD, 1 DELETE
            {"name": "partition", "type": {"type": "array", "items": ["null", "string"]}},
            {"name": "bucket", "type": "int"},
            {"name": "total_buckets", "type": "int"},
            {"name": "file", "type": DATA_FILE_AVRO},
        ],
    }
)

MANIFEST_FILE_META_AVRO = fastavro.parse_schema(
    {
        "type": "record",
        "name": "ManifestFileMeta",
        "namespace": "dts.filestore",
        "fields": [
            {"name": "file_name", "type": "string"},
            {"name": "file_size", "type": "long"},
            {"name": "num_added_files", "type": "long"},
            {"name": "num_deleted_files", "type": "long"},
            {"name": "schema_id", "type": "long"},
        ],
    }
)


@dataclass(frozen=True)
class ManifestEntry:
    """ADD or DELETE of one data file in one partition/bucket."""

    kind: int
    partition: tuple[str | None, ...]
    bucket: int
    total_buckets: int
    file: DataFileMeta

    @property
    def identifier(self) -> tuple[tuple[str | None, ...], int, str]:
        return (self.partition, self.bucket, self.file.file_name)

    def to_avro(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "partition": list(self.partition),
            "bucket": self.bucket,
            "total_buckets": self.total_buckets,
            "file": self.file.to_avro(),
        }

    @classmethod
    def from_avro(cls, d: dict[str, Any]) -> ManifestEntry:
        return cls(
            kind=d["kind"],
            partition=tuple(d["partition"]),
            bucket=d["bucket"],
            total_buckets=d["total_buckets"],
            file=DataFileMeta.from_avro(d["file"]),
        )


@dataclass(frozen=True)
class ManifestFileMeta:
    """One manifest file as a manifest list records it."""

    file_name: str
    file_size: int
    num_added_files: int
    num_deleted_files: int
    schema_id: int


def merge_entries(entries: Iterable[ManifestEntry]) -> list[ManifestEntry]:
    """The live files: ADDs not cancelled by a later DELETE, in order."""
    live: dict[tuple[tuple[str | None, ...], int, str], ManifestEntry] = {}
    for e in entries:
        if e.kind == ADD:
            live[e.identifier] = e
        else:
            live.pop(e.identifier, None)
    return list(live.values())


class ParsedManifests:
    """Parsed manifests and manifest lists by path, least recently used out first.

    Manifest files are immutable (a new uuid name per write), so one cache can serve every
    handle of a catalog: a reader that opens its tables anew for each read (a probe, a
    consistent read of several tables) decodes a snapshot's manifests once, not once a read.
    """

    def __init__(self, max_files: int = 512) -> None:
        self.max_files = max_files
        self._items: OrderedDict[str, tuple[Any, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: str) -> tuple[Any, ...] | None:
        with self._lock:
            hit = self._items.get(path)
            if hit is not None:
                self._items.move_to_end(path)
            return hit

    def put(self, path: str, items: tuple[Any, ...]) -> None:
        with self._lock:
            self._items[path] = items
            while len(self._items) > self.max_files:
                self._items.popitem(last=False)


class ManifestStore:
    """Reads and writes manifests and manifest lists of one table.

    Parsed ones are kept (``ParsedManifests``, the catalog's when the table came from
    one): a long-lived writer (the worker) otherwise decodes the same base manifests again
    for every prepare, compaction check and commit.
    """

    def __init__(
        self, io: FileIO, paths: TablePaths, parsed: ParsedManifests | None = None
    ) -> None:
        self.io = io
        self.paths = paths
        self.parsed = parsed if parsed is not None else ParsedManifests()

    def _cached(self, name: str) -> tuple[Any, ...] | None:
        return self.parsed.get(self.paths.manifest(name))

    def _remember(self, name: str, items: tuple[Any, ...]) -> None:
        self.parsed.put(self.paths.manifest(name), items)

    def _write_avro(self, name: str, schema: Any, records: Sequence[dict[str, Any]]) -> int:
        buf = io.BytesIO()
        fastavro.writer(buf, schema, records, codec="deflate")
        data = buf.getvalue()
        self.io.write_bytes(self.paths.manifest(name), data)
        return len(data)

    def _read_avro(self, name: str) -> list[dict[str, Any]]:
        data = self.io.read_bytes(self.paths.manifest(name))
        return [r for r in fastavro.reader(io.BytesIO(data)) if isinstance(r, dict)]

    def write_manifest(self, entries: Sequence[ManifestEntry], schema_id: int) -> ManifestFileMeta:
        name = f"manifest-{uuid.uuid4()}"
        size = self._write_avro(name, MANIFEST_ENTRY_AVRO, [e.to_avro() for e in entries])
        self._remember(name, tuple(entries))  # the snapshot's readers ask for it next
        return ManifestFileMeta(
            file_name=name,
            file_size=size,
            num_added_files=sum(1 for e in entries if e.kind == ADD),
            num_deleted_files=sum(1 for e in entries if e.kind == DELETE),
            schema_id=schema_id,
        )

    def read_manifest(self, name: str) -> list[ManifestEntry]:
        hit = self._cached(name)
        if hit is None:
            hit = tuple(ManifestEntry.from_avro(r) for r in self._read_avro(name))
            self._remember(name, hit)
        return list(hit)

    def write_list(self, metas: Sequence[ManifestFileMeta]) -> str:
        name = f"manifest-list-{uuid.uuid4()}"
        records = [m.__dict__ for m in metas]
        self._write_avro(name, MANIFEST_FILE_META_AVRO, records)
        self._remember(name, tuple(metas))
        return name

    def read_list(self, name: str) -> list[ManifestFileMeta]:
        hit = self._cached(name)
        if hit is None:
            hit = tuple(ManifestFileMeta(**r) for r in self._read_avro(name))
            self._remember(name, hit)
        return list(hit)

    def read_entries(self, list_names: Iterable[str | None]) -> list[ManifestEntry]:
        """All entries of the manifests in the given lists, in order."""
        entries: list[ManifestEntry] = []
        for list_name in list_names:
            if list_name:
                for meta in self.read_list(list_name):
                    entries.extend(self.read_manifest(meta.file_name))
        return entries
