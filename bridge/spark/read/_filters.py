"""Spark filter pushdown -> a pyarrow compute expression for partition pruning and file skipping.

Every filter is still returned to Spark (see `DtsBatchReader.pushFilters`): the
FileStore uses the expression to skip partitions, buckets and files by their
min/max statistics, and Spark re-checks the rows. That keeps results exact even
where statistics-based skipping is conservative.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from typing import Any

import pyarrow.compute as pc
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)


def _field(attribute: tuple[str, ...], columns: set[str]) -> pc.Expression | None:
    # nested attributes (struct fields) are not pushed down
    if len(attribute) != 1 or attribute[0] not in columns:
        return None
    return pc.field(attribute[0])


def to_expression(f: Filter, columns: set[str]) -> pc.Expression | None:
    """One Spark filter as an Arrow expression, or None when it cannot be expressed."""
    attr = getattr(f, "attribute", None)
    col = _field(attr, columns) if attr is not None else None
    value: Any = getattr(f, "value", None)
    if isinstance(f, Not):
        inner = to_expression(f.child, columns)
        return None if inner is None else ~inner
    if col is None:
        return None
    if isinstance(f, EqualTo | EqualNullSafe):
        return col.is_null() if value is None else col == value
    if isinstance(f, GreaterThan):
        return col > value
    if isinstance(f, GreaterThanOrEqual):
        return col >= value
    if isinstance(f, LessThan):
        return col < value
    if isinstance(f, LessThanOrEqual):
        return col <= value
    if isinstance(f, In):
        return col.isin(list(value))
    if isinstance(f, IsNull):
        return col.is_null()
    if isinstance(f, IsNotNull):
        return col.is_valid()
    if isinstance(f, StringStartsWith):
        return pc.starts_with(col, value)
    return None


def conjunction(filters: Sequence[Filter], columns: set[str]) -> pc.Expression | None:
    """The AND of every expressible filter (None when nothing is expressible)."""
    exprs = [e for e in (to_expression(f, columns) for f in filters) if e is not None]
    if not exprs:
        return None
    return reduce(lambda a, b: a & b, exprs)
