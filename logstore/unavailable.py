"""Debezium's placeholder for a value it did not read: PostgreSQL sends no TOASTed column
(a large text, bytea, jsonb or array) that an update left unchanged when the table's
``REPLICA IDENTITY`` is ``DEFAULT``, and the connector writes
``__debezium_unavailable_value`` (``unavailable.value.placeholder``) in its place.

The old value is not in the event, so the record cannot be applied exactly: storing the
placeholder would be a wrong value, dropping the column a guess. The record is a bad
record whose reason says how to get whole events (``REPLICA IDENTITY FULL``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PLACEHOLDER = "__debezium_unavailable_value"


def unavailable_values(image: pa.Table, present: np.ndarray) -> dict[int, str]:
    """Per record (index) whose image (``present``) carries the placeholder, the reason."""
    reasons: dict[int, str] = {}
    for name in image.column_names:
        found = _found(image.column(name))
        if found is None:
            continue
        for i in np.flatnonzero(found & present).tolist():
            reasons.setdefault(
                int(i),
                f"column {name!r} holds Debezium's placeholder {PLACEHOLDER!r}: PostgreSQL "
                "sent no value for a TOASTed column the update left unchanged (REPLICA "
                "IDENTITY DEFAULT), so the row cannot be written exactly; run ALTER TABLE "
                "... REPLICA IDENTITY FULL on the source table",
            )
    return reasons


def _found(column: pa.ChunkedArray) -> np.ndarray | None:
    """Which rows hold the placeholder (None: the column's type cannot hold it)."""
    typ = column.type
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        hit = pc.equal(column, PLACEHOLDER)
    elif pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        hit = pc.equal(column, pa.scalar(PLACEHOLDER.encode(), typ))
    elif (pa.types.is_list(typ) or pa.types.is_large_list(typ)) and (
        pa.types.is_string(typ.value_type) or pa.types.is_large_string(typ.value_type)
    ):
        flat = column.combine_chunks()
        values = pc.equal(pc.list_flatten(flat), PLACEHOLDER)
        parents = pc.list_parent_indices(flat)
        rows = np.zeros(len(flat), dtype=bool)
        where = np.asarray(pc.fill_null(values, False).to_numpy(zero_copy_only=False), dtype=bool)
        rows[np.asarray(parents.to_numpy(zero_copy_only=False))[where]] = True
        return rows
    else:
        return None
    return np.asarray(pc.fill_null(hit, False).to_numpy(zero_copy_only=False), dtype=bool)
