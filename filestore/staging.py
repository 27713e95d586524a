"""Staged tables: atomic CREATE TABLE AS SELECT (FLIP-305) on the FileStore.

A staged table goes through ``begin`` -> (writes) -> ``commit`` | ``abort``:

- ``begin`` reserves the name with an atomic create-if-absent of
  ``<warehouse>/_staging/<db>.<table>/RESERVATION`` (two concurrent CTAS of one
  name: exactly one reserves it, the other gets ``TableAlreadyExists``), then
  creates the table in a private warehouse ``<warehouse>/_staging/<db>.<table>/<token>``
  through the ordinary ``Catalog`` API. Readers of the real warehouse never see
  it: catalogs only list ``<db>.db`` directories.
- writers write and commit through ``StagedTable.table`` like any table; its
  first snapshot lives under the staging location.
- ``commit`` publishes schema and snapshots in one step: a rename of the staged
  table directory onto ``<warehouse>/<db>.db/<table>``. A replace (RTAS)
  exchanges the two directories atomically (Linux ``renameat2(RENAME_EXCHANGE)``)
  so the old table stays readable until that instant, then deletes the old one.
- ``abort`` removes the staging location and the reservation; the name was
  never visible.

Atomicity holds on local filesystems (rename is atomic there). Object stores
have no atomic directory rename: there ``commit`` copies file by file, so run
CTAS with one writer per name and no concurrent readers of a name being
created. A crashed driver leaves a reservation behind; ``begin`` takes over a
reservation older than ``stale_after_s`` (default one hour).

Table data file paths are relative to the table directory (see
``filestore.format.paths``), which is what makes the move valid.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import time
import uuid
from dataclasses import asdict, dataclass

import pyarrow as pa

from filestore.catalog import Catalog
from filestore.errors import FileStoreError, StagingError, TableAlreadyExists
from filestore.io.fileio import FileIO, resolve_filesystem
from filestore.table import Table

STAGING_DIR = "_staging"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _split(name: str) -> tuple[str, str]:
    db, _, table = name.rpartition(".")
    return (db or "default"), table


@dataclass(frozen=True)
class StagedTable:
    """A table being created (or replaced) atomically. Picklable: plain strings only."""

    warehouse: str
    name: str
    token: str
    replace: bool = False

    # --- where things are ---------------------------------------------------------------
    def _io(self) -> tuple[FileIO, str]:
        fs, root = resolve_filesystem(self.warehouse, None)
        return FileIO(fs), root

    @property
    def _slot(self) -> str:
        return f"{self._io()[1]}/{STAGING_DIR}/{self.name}"

    @property
    def staging_warehouse(self) -> str:
        """The private warehouse holding the staged table (a catalog root)."""
        return f"{self._slot}/{self.token}"

    def _staged_dir(self) -> str:
        db, table = _split(self.name)
        return f"{self.staging_warehouse}/{db}.db/{table}"

    def _target_dir(self) -> str:
        db, table = _split(self.name)
        return f"{self._io()[1]}/{db}.db/{table}"

    def _catalog(self, warehouse: str) -> Catalog:
        return Catalog(warehouse)

    @property
    def table(self) -> Table:
        """The staged `Table` (write and commit to it as to any table)."""
        return self._catalog(self.staging_warehouse).get_table(self.name)

    # --- lifecycle ----------------------------------------------------------------------
    @staticmethod
    def begin(
        warehouse: str,
        name: str,
        schema: pa.Schema,
        primary_key: list[str] | None = None,
        partition_by: list[str] | None = None,
        options: dict[str, str] | None = None,
        *,
        replace: bool = False,
        owner: str = "",
        stale_after_s: float = 3600.0,
    ) -> StagedTable:
        """Reserve `name` and create it, empty, under a staging location.

        Raises `TableAlreadyExists` when the table exists (unless `replace`) or when
        another staged creation of the same name is under way.
        """
        if "." not in name:
            name = f"default.{name}"
        staged = StagedTable(warehouse, name, uuid.uuid4().hex, replace)
        io, _ = staged._io()
        if not replace and staged._catalog(warehouse).table_exists(name):
            raise TableAlreadyExists(f"table {name} already exists (use replace to overwrite it)")
        staged._reserve(io, owner, stale_after_s)
        try:
            cat = staged._catalog(staged.staging_warehouse)
            db, _ = _split(name)
            with contextlib.suppress(FileStoreError):
                cat.create_database(db)
            cat.create_table(
                name,
                schema,
                primary_key=primary_key or None,
                partition_by=partition_by or None,
                options=options or None,
            )
        except BaseException:
            staged.abort()
            raise
        return staged

    def _reservation(self) -> str:
        return f"{self._slot}/RESERVATION"

    def _reserve(self, io: FileIO, owner: str, stale_after_s: float) -> None:
        body = json.dumps({**asdict(self), "owner": owner, "time_millis": int(time.time() * 1000)})
        if io.create_if_absent(self._reservation(), body.encode()):
            return
        held = io.try_read_bytes(self._reservation())
        info = json.loads(held) if held else {}
        age_s = time.time() - info.get("time_millis", 0) / 1000
        if held is not None and age_s < stale_after_s:
            raise TableAlreadyExists(
                f"table {self.name} is being created by another staged write "
                f"(owner {info.get('owner') or '?'}, {age_s:.0f} s ago); retry when it finishes"
            )
        # a crashed creator left it: clean its staging data, then race for the name again
        if info.get("token"):
            io.delete_dir(f"{self._slot}/{info['token']}")
        io.delete_file(self._reservation())
        if not io.create_if_absent(self._reservation(), body.encode()):
            raise TableAlreadyExists(f"table {self.name} is being created by another staged write")

    def _holds_reservation(self, io: FileIO) -> bool:
        held = io.try_read_bytes(self._reservation())
        return held is not None and json.loads(held).get("token") == self.token

    def commit(self) -> Table:
        """Publish the staged table (schema and snapshots) under its name; return the Table."""
        io, _ = self._io()
        if not self._holds_reservation(io):
            raise StagingError(f"staged table {self.name} ({self.token}) lost its reservation")
        staged, target = self._staged_dir(), self._target_dir()
        io.mkdirs(target.rsplit("/", 1)[0])
        try:
            if self.replace and io.exists(target):
                self._exchange(io, staged, target)  # old table now sits at `staged`
            else:
                self._publish(io, staged, target)
        except BaseException:
            self.abort()
            raise
        self._cleanup(io)
        return self._catalog(self.warehouse).get_table(self.name)

    def abort(self) -> None:
        """Remove everything staged and release the name (idempotent)."""
        io, _ = self._io()
        io.delete_dir(self.staging_warehouse)
        if self._holds_reservation(io):
            io.delete_file(self._reservation())
        self._remove_empty_slot(io)

    # --- helpers ------------------------------------------------------------------------
    def _cleanup(self, io: FileIO) -> None:
        io.delete_dir(self.staging_warehouse)
        io.delete_file(self._reservation())
        self._remove_empty_slot(io)

    def _remove_empty_slot(self, io: FileIO) -> None:
        if io.is_local:
            with contextlib.suppress(OSError):
                os.rmdir(self._slot)

    def _publish(self, io: FileIO, staged: str, target: str) -> None:
        if io.is_local:
            try:
                # rename(2) replaces an *empty* directory; refuse that explicitly
                if os.path.isdir(target) and not os.listdir(target):
                    os.rmdir(target)
                os.rename(staged, target)
            except OSError as e:
                if os.path.exists(target):
                    raise TableAlreadyExists(self._created_meanwhile()) from e
                raise
            return
        if io.exists(target):
            raise TableAlreadyExists(self._created_meanwhile())
        io.move(staged, target)

    def _created_meanwhile(self) -> str:
        # the same words as a plain create's refusal: callers (and users) match on them
        return (
            f"table {self.name} already exists: another writer created it while this one "
            "was staged; nothing of this write is visible"
        )

    def _exchange(self, io: FileIO, staged: str, target: str) -> None:
        if io.is_local and _renameat2(staged, target, _RENAME_EXCHANGE):
            return
        # no atomic exchange here: move the old table aside, then the new one in
        aside = f"{self._slot}/{self.token}-old"
        io.move(target, aside)
        try:
            io.move(staged, target)
        except BaseException:
            io.move(aside, target)
            raise
        io.delete_dir(aside)


def _renameat2(a: str, b: str, flags: int) -> bool:
    """Atomically exchange two paths (Linux); False where unsupported."""
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), flags)
    if rc != 0:
        errno = ctypes.get_errno()
        if errno in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: filesystem cannot exchange
            return False
        raise OSError(errno, os.strerror(errno), a)
    return True
