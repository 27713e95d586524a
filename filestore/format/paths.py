"""Where things live inside a table directory (layout fixed by DESIGN.md)."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote, unquote

DEFAULT_PARTITION = "__DEFAULT_PARTITION__"
# characters Hive escapes in partition directory names
_SAFE = "".join(c for c in "!$&'()*+,;@[]^`{|}~-._ " if c not in '/=%:#?\\"')


def escape_partition_value(value: str | None) -> str:
    if value is None:
        return DEFAULT_PARTITION
    return quote(value, safe=_SAFE)


def unescape_partition_value(text: str) -> str | None:
    return None if text == DEFAULT_PARTITION else unquote(text)


def partition_path(keys: Sequence[str], values: Sequence[str | None]) -> str:
    """'dt=2024-01-01/region=eu' (empty for unpartitioned tables)."""
    return "/".join(f"{k}={escape_partition_value(v)}" for k, v in zip(keys, values, strict=True))


class TablePaths:
    """Paths of one table's files."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")

    @property
    def schema_dir(self) -> str:
        return f"{self.root}/schema"

    def schema(self, schema_id: int) -> str:
        return f"{self.schema_dir}/schema-{schema_id}"

    @property
    def snapshot_dir(self) -> str:
        return f"{self.root}/snapshot"

    def snapshot(self, snapshot_id: int) -> str:
        return f"{self.snapshot_dir}/snapshot-{snapshot_id}"

    @property
    def latest_hint(self) -> str:
        return f"{self.snapshot_dir}/LATEST"

    @property
    def earliest_hint(self) -> str:
        return f"{self.snapshot_dir}/EARLIEST"

    @property
    def manifest_dir(self) -> str:
        return f"{self.root}/manifest"

    def manifest(self, name: str) -> str:
        return f"{self.manifest_dir}/{name}"

    @property
    def tag_dir(self) -> str:
        return f"{self.root}/tag"

    def tag(self, name: str) -> str:
        return f"{self.tag_dir}/tag-{name}"

    @property
    def consumer_dir(self) -> str:
        return f"{self.root}/consumer"

    def consumer(self, consumer_id: str) -> str:
        return f"{self.consumer_dir}/consumer-{consumer_id}"

    def bucket_dir(
        self, partition_keys: Sequence[str], partition: Sequence[str | None], bucket: int
    ) -> str:
        part = partition_path(partition_keys, partition)
        return f"{self.root}/{part}/bucket-{bucket}" if part else f"{self.root}/bucket-{bucket}"

    def data_file(
        self, partition_keys: Sequence[str], partition: Sequence[str | None], bucket: int, name: str
    ) -> str:
        return f"{self.bucket_dir(partition_keys, partition, bucket)}/{name}"
