"""Changes of a FileStore table between two snapshots, as rows with `_row_kind`.

`USE_NATIVE_CHANGES` switches to `Table.changes(start, end)` (FileStore issue 3).
It is off for now: at the time of writing, the native diff returned no rows for a
snapshot with an update and a delete (and `diff_states` dropped the delete), so
this module computes a vectorized diff of the two snapshots' full reads:
by primary key for primary-key tables (+I / -D / -U,+U), as a multiset of whole
rows otherwise (+I / -D). The fallback costs a full read of both snapshots, so
it is only meant for small tables and tests; the native path replaces it.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pyarrow as pa

from bridge.spark.options import ROW_KIND

USE_NATIVE_CHANGES = False


def snapshot_changes(
    table: Any, start: int, end: int, columns: list[str] | None = None
) -> pa.Table:
    """Rows changed after snapshot `start` (exclusive, 0 = empty) up to `end` (inclusive)."""
    native = getattr(table, "changes", None)
    if USE_NATIVE_CHANGES and native is not None:
        try:
            out = native(start, end)
        except NotImplementedError:
            out = None
        if out is not None:
            keep = [*(columns or [n for n in out.schema.names if n != ROW_KIND]), ROW_KIND]
            return out.select([c for c in keep if c in out.schema.names])
    return _diff(table, start, end, columns)


def _read(table: Any, snapshot_id: int, columns: list[str] | None) -> pa.Table:
    if snapshot_id <= 0:
        return table.schema.arrow_schema.empty_table()
    return table.read(snapshot_id=snapshot_id)


def _diff(table: Any, start: int, end: int, columns: list[str] | None) -> pa.Table:
    before = pl.from_arrow(_read(table, start, columns))
    after = pl.from_arrow(_read(table, end, columns))
    assert isinstance(before, pl.DataFrame) and isinstance(after, pl.DataFrame)
    names = after.columns
    pk = list(table.schema.primary_key or [])
    out = _diff_by_key(before, after, pk) if pk else _diff_multiset(before, after, names)
    cols = [*(columns or names), ROW_KIND]
    return out.select(cols).to_arrow()


def _kind(df: pl.DataFrame, kind: str) -> pl.DataFrame:
    return df.with_columns(pl.lit(kind).alias(ROW_KIND))


def _diff_by_key(before: pl.DataFrame, after: pl.DataFrame, pk: list[str]) -> pl.DataFrame:
    names = after.columns
    values = [c for c in names if c not in pk]
    inserted = after.join(before, on=pk, how="anti", nulls_equal=True)
    deleted = before.join(after, on=pk, how="anti", nulls_equal=True)
    both = after.join(before, on=pk, how="inner", suffix="__old", nulls_equal=True)
    if values:
        changed = pl.any_horizontal([pl.col(c).ne_missing(pl.col(f"{c}__old")) for c in values])
        both = both.filter(changed)
    else:
        both = both.clear()
    old = both.select([*pk, *[pl.col(f"{c}__old").alias(c) for c in values]]).select(names)
    new = both.select(names)
    parts = [_kind(deleted, "-D"), _kind(old, "-U"), _kind(new, "+U"), _kind(inserted, "+I")]
    return pl.concat(parts, how="vertical_relaxed")


def _diff_multiset(before: pl.DataFrame, after: pl.DataFrame, names: list[str]) -> pl.DataFrame:
    if not names:
        return _kind(after.clear(), "+I")
    a = after.group_by(names).len(name="__n")
    b = before.group_by(names).len(name="__m")
    joined = a.join(b, on=names, how="full", coalesce=True, nulls_equal=True).with_columns(
        # counts are u32: subtract (and later negate) as signed integers
        (
            pl.col("__n").cast(pl.Int64).fill_null(0) - pl.col("__m").cast(pl.Int64).fill_null(0)
        ).alias("__d")
    )

    def repeat(df: pl.DataFrame, count: pl.Expr, kind: str) -> pl.DataFrame:
        rep = df.with_columns(count.alias("__r")).filter(pl.col("__r") > 0)
        idx = rep.select(pl.int_range(pl.len()).repeat_by(pl.col("__r")).explode().alias("__i"))
        rows = rep.select(names).with_row_index("__i").join(idx, on="__i").drop("__i")
        return _kind(rows, kind)

    deleted = repeat(joined, -pl.col("__d"), "-D")
    inserted = repeat(joined, pl.col("__d"), "+I")
    return pl.concat([deleted, inserted], how="vertical_relaxed")
