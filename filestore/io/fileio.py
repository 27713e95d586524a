"""File access over any pyarrow filesystem, with the one atomic primitive commits need.

``create_if_absent`` is how a snapshot becomes visible. On a local filesystem it
is exact: the bytes go to a temporary file which is then hard-linked to the
target; ``link`` fails when the target exists, so of two racers exactly one wins
and readers never see a half-written file. Other pyarrow filesystems (S3, GCS,
HDFS) offer no create-if-absent through pyarrow. On S3 (and S3-compatible stores)
it is a conditional PUT with ``If-None-Match: *`` through obstore
(``filestore.io.conditional``), atomic on the service side, so several committers per
table are safe. Elsewhere (and on stores that refuse conditional writes) we check,
write, then read back and compare, which detects most lost races but is not
airtight: run one committer per table there or put a lock in front.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs

from filestore.errors import ConditionalCreateUnsupported
from filestore.io.conditional import ConditionalCreate, for_filesystem

_OUTPUT_BUFFER = 1 << 20

log = logging.getLogger(__name__)


def resolve_filesystem(
    warehouse: str, filesystem: pafs.FileSystem | None
) -> tuple[pafs.FileSystem, str]:
    """(filesystem, root path) for a warehouse path or URI."""
    if filesystem is not None:
        return filesystem, warehouse.rstrip("/")
    parsed = urlparse(warehouse)
    if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
        path = parsed.path if parsed.scheme == "file" else warehouse
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(path))
    fs, path = pafs.FileSystem.from_uri(warehouse)
    return fs, path.rstrip("/")


def has_directories(fs: pafs.FileSystem) -> bool:
    """False for object stores, where a key needs no parent: creating one there costs a
    request per level (pyarrow writes an empty marker object for each) and buys nothing."""
    return fs.type_name not in ("s3", "gcs")


class FileIO:
    """Small, explicit file operations on one filesystem."""

    def __init__(self, fs: pafs.FileSystem) -> None:
        self.fs = fs
        self.is_local = isinstance(fs, pafs.LocalFileSystem)
        self.conditional: ConditionalCreate | None = None if self.is_local else for_filesystem(fs)

    def exists(self, path: str) -> bool:
        return bool(self.fs.get_file_info(path).type != pafs.FileType.NotFound)

    def is_dir(self, path: str) -> bool:
        return bool(self.fs.get_file_info(path).type == pafs.FileType.Directory)

    def mkdirs(self, path: str) -> None:
        self.fs.create_dir(path, recursive=True)

    def ensure_parent(self, path: str) -> None:
        """Make the directory a file is about to be written into, where directories exist."""
        if has_directories(self.fs):
            self.mkdirs(path.rsplit("/", 1)[0])

    def list_dir(self, path: str) -> list[pafs.FileInfo]:
        """Direct children of path; empty when path does not exist."""
        selector = pafs.FileSelector(path, allow_not_found=True, recursive=False)
        return list(self.fs.get_file_info(selector))

    def read_bytes(self, path: str) -> bytes:
        with self.fs.open_input_file(path) as f:
            return bytes(f.read())

    def try_read_bytes(self, path: str) -> bytes | None:
        try:
            return self.read_bytes(path)
        except (FileNotFoundError, OSError):
            return None

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write (overwriting); atomic via rename on local disks."""
        if self.is_local:
            os.replace(self._local_temp(path, data, durable=False), path)
            return
        self._write_stream(path, data)

    def write_unpublished(self, path: str, data: bytes) -> None:
        """Write a file that nothing names until a later write publishes it (a manifest
        before its list): in place, without the temporary file and rename of
        ``write_bytes``. A crash leaves at worst a partial file no reader is pointed at."""
        self._write_stream(path, data)

    def create_if_absent(self, path: str, data: bytes) -> bool:
        """Create path with data unless it exists; True when this call created it."""
        if self.is_local:
            tmp = self._local_temp(path, data, durable=True)
            try:
                os.link(tmp, path)
                return True
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
        if self.conditional is not None:
            try:
                return self.conditional.create(path, data)
            except ConditionalCreateUnsupported as e:
                log.warning("%s; one committer per table only from now on", e)
                self.conditional = None
        if self.exists(path):
            return False
        self._write_stream(path, data)
        return self.read_bytes(path) == data

    def _local_temp(self, path: str, data: bytes, *, durable: bool) -> str:
        """A hidden temporary file holding data beside path (on disk when durable), to be
        renamed or linked into place so readers never see a half-written file."""
        parent = path.rsplit("/", 1)[0]
        self.mkdirs(parent)
        tmp = f"{parent}/.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            if durable:  # a commit must survive a crash once it is visible
                f.flush()
                os.fsync(f.fileno())
        return tmp

    def _write_stream(self, path: str, data: bytes) -> None:
        self.ensure_parent(path)
        with self.fs.open_output_stream(path) as out:
            out.write(data)

    def delete_file(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(path)

    def delete_dir(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_dir(path)

    def move(self, src: str, dst: str) -> None:
        self.fs.move(src, dst)

    def file_size(self, path: str) -> int:
        return int(self.fs.get_file_info(path).size or 0)

    def open_output(self, path: str) -> pa.NativeFile:
        # buffered: the Parquet writer emits many small writes (one per page)
        return self.fs.open_output_stream(path, buffer_size=_OUTPUT_BUFFER)
