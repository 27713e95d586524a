"""What the last Iceberg sync of a table handle wrote, so the next commit writes and
encodes only what is new (``filestore.iceberg.sync``).

Kept per handle (a ``TableContext``), and trusted only while the files say the same:
the version hint names the version it wrote and that metadata file holds, byte for byte,
what it wrote. Anything else (another process synced, a sync failed half way, the
metadata was dropped) sends the sync back to the files: it lists the directory and
parses the metadata as if it had never run. A sync takes the state out while it runs
and puts it back only when it succeeded, so a failure leaves none behind.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from filestore.format.schema import TableSchema
from filestore.iceberg.deletes import DeleteChain
from filestore.state.context import TableContext

VERSION_SUFFIX = ".metadata.json"
#: stands for the snapshot list while the rest of the metadata is encoded
_SNAPSHOTS = "\x00dts-snapshots\x00"
_SNAPSHOT_LOG = "\x00dts-snapshot-log\x00"


@dataclass
class SyncState:
    version: int  # the metadata version this describes
    written: bytes  # that version's file as written
    entries: dict[int, dict[str, Any]]  # snapshot id -> its Iceberg snapshot entry
    retained: list[int]  # the dts snapshots it named (tagged ones aside)
    # the metadata directory as listed, plus what syncs wrote since, minus what they deleted:
    versions: set[int] = field(default_factory=set)
    avro: dict[int, set[str]] = field(default_factory=dict)  # snapshot id -> its lists/manifests
    deletes: dict[str, tuple[str, int]] = field(default_factory=dict)  # prefix -> (name, size)
    # data file path -> its delete files in the last snapshot written: the next grows them
    chains: dict[str, DeleteChain] = field(default_factory=dict)
    # encoded once: an entry and its snapshot-log line never change once written
    encoded: dict[int, tuple[str, str]] = field(default_factory=dict)
    # one_sorted_run of a bucket's files, by their names (files are immutable)
    runs: dict[tuple[str, ...], bool] = field(default_factory=dict)
    # schema ids -> (FieldIds, spec, Iceberg schemas, name mapping): a new version changes the key
    schemas: dict[tuple[int, ...], tuple[Any, ...]] = field(default_factory=dict)
    # schema id -> the version as read (immutable under its id)
    schema_versions: dict[int, TableSchema] = field(default_factory=dict)
    # the last snapshot written: (its id, its manifest list, what a reader sees in it);
    # a child that shows the same names that list rather than writing its own
    last_visible: tuple[int, str, Any] | None = None

    def add_names(self, names: Iterable[tuple[str, int]]) -> None:
        """Index metadata files (name, size) by what a sync looks them up for."""
        for name, size in names:
            if name.startswith("v") and name.endswith(VERSION_SUFFIX):
                number = name[1 : -len(VERSION_SUFFIX)]
                if number.isdigit():
                    self.versions.add(int(number))
            elif name.endswith(".avro"):
                sid = snapshot_of(name)
                if sid is not None:
                    self.avro.setdefault(sid, set()).add(name)
            elif name.startswith("deletes-") and name.endswith(".parquet"):
                self.deletes[name[: name.rindex("-") + 1]] = (name, size)


def snapshot_of(name: str) -> int | None:
    """The snapshot id in ``snap-<id>-dts.avro`` and ``<id>-dts-m<k>.avro``."""
    parts = name.split("-")
    number = parts[1] if parts[0] == "snap" and len(parts) > 1 else parts[0]
    return int(number) if number.isdigit() else None


def _list_name(entry: dict[str, Any]) -> str:
    """The file name of the manifest list a snapshot entry names."""
    return str(entry["manifest-list"]).rsplit("/", 1)[-1]


def list_owner(entry: dict[str, Any]) -> int:
    """The snapshot whose files an entry's manifest list is (its own, or an earlier
    snapshot's it shares)."""
    owner = snapshot_of(_list_name(entry))
    return int(entry["snapshot-id"]) if owner is None else owner


def list_written(entry: dict[str, Any], state: SyncState) -> bool:
    """The manifest list an entry names is among the files (a sync that failed half way
    may have published none)."""
    return _list_name(entry) in state.avro.get(list_owner(entry), ())


#: one lock for every handle: swapping a handle's state is a few instructions
_LOCK = threading.Lock()


def take_state(ctx: TableContext) -> SyncState | None:
    """The handle's state, removed: two syncs of one handle at once never share one."""
    with _LOCK:
        state, ctx.iceberg_sync = ctx.iceberg_sync, None
    return state if isinstance(state, SyncState) else None


def keep_state(ctx: TableContext, state: SyncState) -> None:
    with _LOCK:
        ctx.iceberg_sync = state


def forget_state(ctx: TableContext) -> None:
    take_state(ctx)


def encode_metadata(
    head: Mapping[str, Any],
    entries: Sequence[dict[str, Any]],
    encoded: dict[int, tuple[str, str]],
) -> bytes:
    """``json.dumps`` of ``head`` with its snapshot list and log, byte for byte, with
    each snapshot's part encoded once per state (``encoded`` is filled as it goes):
    the metadata names every retained snapshot, and encoding them all again was most
    of what a commit paid to write it."""
    parts, log = [], []
    for e in entries:
        sid = int(e["snapshot-id"])
        done = encoded.get(sid)
        if done is None:
            line = {"timestamp-ms": e["timestamp-ms"], "snapshot-id": e["snapshot-id"]}
            done = encoded[sid] = (json.dumps(e), json.dumps(line))
        parts.append(done[0])
        log.append(done[1])
    text = json.dumps({**head, "snapshots": _SNAPSHOTS, "snapshot-log": _SNAPSHOT_LOG})
    # json.dumps of a list is "[" + ", ".join(items) + "]" with the default separators
    text = text.replace(json.dumps(_SNAPSHOTS), "[" + ", ".join(parts) + "]", 1)
    text = text.replace(json.dumps(_SNAPSHOT_LOG), "[" + ", ".join(log) + "]", 1)
    return text.encode()
