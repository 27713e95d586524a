"""What a consistent read answers, as plain values: table names, modes, versions.

No pydantic here, on purpose: a consistent read without the MetaService
(`dts.consistent_read(spark, tables, warehouse=W)`) runs on a Spark driver that has
only `dynamic-table-storage[spark]` installed, and computes its answer from the
FileStore's snapshots with this module and `bridge.meta.consistency`. The MetaService
serves and its client parses the same dataclasses: pydantic validates and describes
stdlib dataclasses (``__pydantic_config__``, attribute docstrings), so both sides
return one type and the HTTP API keeps its schema.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Literal

DEFAULT_DATABASE = "default"
# db and table parts at most 127 characters each, so "default." + table still fits 255
TABLE_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_\-]{0,126}(\.[A-Za-z0-9_][A-Za-z0-9_\-]{0,126})?$"
_TABLE_RE = re.compile(TABLE_PATTERN)
# what the API models (pydantic's BaseModel subclasses) use too: an unknown field is an error
_API_CONFIG: dict[str, Any] = {"extra": "forbid", "use_attribute_docstrings": True}


def normalize_table_name(name: str) -> str:
    """``t1`` -> ``default.t1``; ``db.t1`` stays. Raises ValueError naming the rule broken."""
    if not isinstance(name, str) or not (1 <= len(name) <= 255) or not _TABLE_RE.match(name):
        raise ValueError(
            f"invalid table name {name!r}: expected 'db.table' or 'table' "
            "(letters, digits, '_' and '-', each part at most 127 characters)"
        )
    return name if "." in name else f"{DEFAULT_DATABASE}.{name}"


class ConsistencyMode(StrEnum):
    STRONG = "strong"
    WEAK = "weak"


#: a consistency mode by name, where callers give a word
ConsistencyModeName = Literal["strong", "weak"]


@dataclass
class TableVersion:
    """One table's part of a consistent version."""

    __pydantic_config__: ClassVar[dict[str, Any]] = _API_CONFIG

    table: str
    listed: bool
    """False for a table included because it lies between listed ones"""
    barrier: int | None
    """the barrier to read the table at"""
    snapshot_id: int | None
    """the table's snapshot at that barrier"""
    latest_barrier: int | None
    latest_snapshot_id: int | None
    behind_ms: int | None
    """latest_barrier - barrier: newer data not read"""
    lag_ms: int | None
    """newest latest_barrier of all tables - this table's"""


@dataclass
class ConsistentVersion:
    __pydantic_config__: ClassVar[dict[str, Any]] = _API_CONFIG

    mode: ConsistencyMode
    barrier: int | None
    """strong: the common barrier; weak: None"""
    tables: list[TableVersion]
    held_back_by: str | None
    """the table whose progress limits the answer"""
    holdback_ms: int
    """how far the answer is behind the newest table (ms)"""
    message: str
