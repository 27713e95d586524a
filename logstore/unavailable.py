"""Debezium's placeholder for a value it did not read: PostgreSQL sends no TOASTed column
(a large text, bytea, jsonb or array) that an update left unchanged when the table's
``REPLICA IDENTITY`` is ``DEFAULT``, and the connector writes
``__debezium_unavailable_value`` (``unavailable.value.placeholder``) in its place.

The old value is not in the event. Storing the placeholder would be a wrong value,
dropping the column a guess. So by default the record is a bad record whose reason says
how to get whole events (``REPLICA IDENTITY FULL``) or the current value
(``log.unavailable-values=keep-current``). With that table option the placeholder goes
into the table's log as sent, and the worker's per-bucket state fills in each such column
with the key's current value (``fill_unavailable``): the column's last value before the
record, from earlier records of the same batch or from the state. A record whose key has
no current value (its row was never seen whole: no initial snapshot) cannot be filled and
is a bad record.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

PLACEHOLDER = "__debezium_unavailable_value"


def unavailable_values(image: pa.Table, present: np.ndarray) -> dict[int, str]:
    """Per record (index) whose image (``present``) carries the placeholder, the reason."""
    reasons: dict[int, str] = {}
    for name in image.column_names:
        found = placeholder_cells(image.column(name))
        if found is None:
            continue
        for i in np.flatnonzero(found & present).tolist():
            reasons.setdefault(
                int(i),
                f"column {name!r} holds Debezium's placeholder {PLACEHOLDER!r}: PostgreSQL "
                "sent no value for a TOASTed column the update left unchanged (REPLICA "
                "IDENTITY DEFAULT), so the row cannot be written exactly; run ALTER TABLE "
                "... REPLICA IDENTITY FULL on the source table, or set the dts table's option "
                "log.unavailable-values=keep-current",
            )
    return reasons


def placeholder_cells(column: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
    """Which rows hold the placeholder (None: the column's type cannot hold it)."""
    typ = column.type
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        hit = pc.equal(column, PLACEHOLDER)
    elif pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        hit = pc.equal(column, pa.scalar(PLACEHOLDER.encode(), typ))
    elif (pa.types.is_list(typ) or pa.types.is_large_list(typ)) and (
        pa.types.is_string(typ.value_type) or pa.types.is_large_string(typ.value_type)
    ):
        flat = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        values = pc.equal(pc.list_flatten(flat), PLACEHOLDER)
        parents = pc.list_parent_indices(flat)
        rows = np.zeros(len(flat), dtype=bool)
        where = np.asarray(pc.fill_null(values, False).to_numpy(zero_copy_only=False), dtype=bool)
        rows[np.asarray(parents.to_numpy(zero_copy_only=False))[where]] = True
        return rows
    else:
        return None
    return np.asarray(pc.fill_null(hit, False).to_numpy(zero_copy_only=False), dtype=bool)


#: why a record is a dead letter when its placeholder cannot be filled in
UNFILLABLE = (
    f"a column holds Debezium's placeholder {PLACEHOLDER!r} (a value the source did not "
    "send) and its key has no current value to keep (log.unavailable-values=keep-current): "
    "the row was never read whole (no initial snapshot?) or was deleted before"
)
UNRESOLVED = "__dts_unresolved"
_CARRIER = "__dts_carrier"
_ROW = "__dts_row"


def fill_unavailable(
    df: pl.DataFrame, key: list[str], values: list[str], state: pl.DataFrame, kind: str
) -> pl.DataFrame:
    """``df`` (one batch, in log order; ``kind``: its row-kind column) with every
    placeholder replaced by the column's value before it: from the last earlier row of the
    same key that carries one, else from ``state`` (each key's current row). A cell with
    neither (the key unknown, or deleted earlier in the batch) stays; its row is marked in
    the boolean column ``UNRESOLVED``."""
    masks = {}
    for c in values:
        found = placeholder_cells(df[c].to_arrow())
        if found is not None and found.any():
            masks[c] = found
    unresolved = np.zeros(len(df), dtype=bool)
    if not masks:
        return df.with_columns(pl.Series(UNRESOLVED, unresolved))
    rows = np.arange(len(df), dtype=np.int64)
    deleted = (df[kind] == "-D").to_numpy()
    current = (
        df.select(key)
        .with_row_index(_ROW)
        .join(
            state.select([*key, *masks]).with_columns(pl.lit(True).alias("__in")),
            on=key,
            how="left",
        )
        .sort(_ROW)
    )
    known = current["__in"].fill_null(False).to_numpy()
    filled = []
    for c, mask in masks.items():
        # each row's carrier of column c: itself when it holds a value, -2 after a delete
        # (nothing to keep), none where it holds the placeholder; carried forward per key
        own = np.where(mask, -1, np.where(deleted, -2, rows))
        carried = (
            df.select(key)
            .with_columns(pl.Series(_CARRIER, own, dtype=pl.Int64))
            .select(
                pl.when(pl.col(_CARRIER) != -1)
                .then(pl.col(_CARRIER))
                .forward_fill()
                .over(key)
                .alias(_CARRIER)
            )[_CARRIER]
        )
        carrier = carried.fill_null(-1).to_numpy()
        from_batch = mask & (carrier >= 0)
        from_state = mask & carried.is_null().to_numpy() & known
        unresolved |= mask & ~from_batch & ~from_state
        column = df[c].to_arrow()
        picked = column.take(pa.array(np.where(from_batch, carrier, rows)))
        value = pc.if_else(pa.array(from_state), current[c].to_arrow(), picked)
        filled.append(pl.Series(c, value, dtype=df.schema[c]))
    return df.with_columns(*filled, pl.Series(UNRESOLVED, unresolved))
