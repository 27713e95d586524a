"""Normalizer: an upsert changelog -> a full changelog (Flink's ChangelogNormalize).

Upsert-mode logs store only +I/+U (as inserts) and -D, possibly key-only. The
normalizer keeps the last row per primary key and emits, per input row:
``+I`` for a new key, ``-U`` (old row) + ``+U`` (new row) for a changed key,
nothing for an identical re-insert, the full ``-D`` row for a delete of a
known key, nothing for a delete of an unknown key. ``-U`` inputs are ignored
(rebuilt from state). ``seed(rows)`` loads existing rows as state first (a
consumer resuming from a FileStore snapshot).

State is sharded by key hash; shards live in memory until the total passes
``max_rows_in_memory``, then the largest are spilled to Arrow IPC files and
loaded back only when a batch touches them. All work is per batch in polars, and a
batch's polars calls do not grow with the shards it touches: their rows are looked up
and updated as one frame, then split back by shard (a per-shard join, filter and
concat once made a 100-row batch touching 32 shards cost as much as 32 batches).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from logstore.errors import LogSpecError
from logstore.spec import OFFSET_COLUMN, PARTITION_COLUMN, ROW_KIND, LogSpec
from logstore.unavailable import UNRESOLVED, fill_unavailable

_SHARD = "__dts_shard"
_IDX = "__dts_i"
_PART = "__dts_part"


class Normalizer:
    """Stateful, per table. ``process(rows)`` returns the normalized rows of one batch."""

    def __init__(
        self,
        spec: LogSpec,
        max_rows_in_memory: int = 1_000_000,
        spill_dir: str | Path | None = None,
        shards: int = 32,
        partition_column: str | None = None,
        full_changelog: bool = True,
    ) -> None:
        """``partition_column``: the input column naming each row's log partition, kept in
        the state so that ``retract_partition`` can remove one partition's rows.
        ``full_changelog=False``: no ``-U`` rows out (the state only fills in values)."""
        if not spec.primary_key:
            raise LogSpecError(f"{spec.topic}: normalizing an upsert log needs a primary key")
        self.spec = spec
        self.key = list(spec.primary_key)
        self.values = list(spec.schema.names)
        self.max_rows_in_memory = max_rows_in_memory
        self.shards = shards
        self.partition_column = partition_column
        # what the state keeps of a row: its values, and its partition when asked to
        self._kept = [*self.values, *([_PART] if partition_column else [])]
        self._own_dir = spill_dir is None
        self._dir = Path(spill_dir) if spill_dir is not None else None
        # in-memory shards: the state's rows and their shard (_SHARD), so that one frame of
        # several shards splits back by it; spilled files hold the rows alone
        self._mem: dict[int, pl.DataFrame] = {}
        self._empty = self._empty_state()
        self._spilled: dict[int, Path] = {}
        self._spilled_rows: dict[int, int] = {}
        self.spills = 0
        # log.unavailable-values=keep-current: Debezium's placeholders are filled in from
        # the key's current row; rows with one that cannot be are set apart here
        self.fills_unavailable = spec.unavailable_values == "keep-current"
        self.full_changelog = full_changelog
        self.unresolved: pa.Table | None = None

    # ------------------------------------------------------------------ state

    @property
    def state_rows(self) -> int:
        return sum(len(df) for df in self._mem.values()) + sum(self._spilled_rows.values())

    @property
    def rows_in_memory(self) -> int:
        return sum(len(df) for df in self._mem.values())

    def _empty_state(self) -> pl.DataFrame:
        df = pl.from_arrow(self.spec.schema.empty_table())
        assert isinstance(df, pl.DataFrame)
        return self._with_partition(df).with_columns(pl.lit(0, pl.Int64).alias(_SHARD))

    def _with_partition(self, df: pl.DataFrame) -> pl.DataFrame:
        """``df`` with the state's partition column, if it keeps one (null when unknown)."""
        if self.partition_column is None:
            return df
        given = self.partition_column in df.columns
        part = pl.col(self.partition_column) if given else pl.lit(None)
        return df.with_columns(part.cast(pl.Int64).alias(_PART))

    def _shard(self, s: int) -> pl.DataFrame:
        if s in self._mem:
            return self._mem[s]
        path = self._spilled.pop(s, None)
        self._spilled_rows.pop(s, None)
        if path is None:
            df = self._empty
        else:
            df = pl.read_ipc(path).with_columns(pl.lit(s, pl.Int64).alias(_SHARD))
            path.unlink(missing_ok=True)
        self._mem[s] = df
        return df

    def _held(self, touched: list[int]) -> pl.DataFrame:
        """The rows of the touched shards, as one frame (loading spilled ones)."""
        frames = [self._shard(s) for s in touched]
        return pl.concat(frames, how="vertical_relaxed") if frames else self._empty

    def _spill_if_needed(self, keep: set[int]) -> None:
        while self.rows_in_memory > self.max_rows_in_memory:
            candidates = sorted(
                ((len(df), s) for s, df in self._mem.items() if len(df)),
                reverse=True,
            )
            if not candidates:
                return
            # prefer shards the current batch did not touch
            rows, s = next(((r, s) for r, s in candidates if s not in keep), candidates[0])
            if self._dir is None:
                self._dir = Path(tempfile.mkdtemp(prefix="dts-normalize-"))
            self._dir.mkdir(parents=True, exist_ok=True)
            path = self._dir / f"shard-{s}.arrow"
            self._mem.pop(s).drop(_SHARD).write_ipc(path)
            self._spilled[s] = path
            self._spilled_rows[s] = rows
            self.spills += 1

    def retract_all(self) -> pa.Table:
        """Every row the state holds, as a full ``-D`` (a truncate removed them), and then
        forget them: what a reader of the changelog sees of a truncate. Spilled shards are
        read one at a time, never loaded back into the state."""
        removed = []
        for s in sorted({*self._mem, *self._spilled}):
            path = self._spilled.get(s)
            rows = self._mem[s] if path is None else pl.read_ipc(path)
            removed.append(self._as_deletes(rows))
        self.clear()
        return self._concat_deletes(removed)

    def retract_partition(self, partition: int) -> pa.Table:
        """The state's rows of one log partition as full ``-D`` rows, then forget them (a
        truncate record removes its partition's rows; the others stay). Needs the
        ``partition_column``. Shard by shard, spilling again as it goes: the state stays
        within ``max_rows_in_memory`` however much of it was spilled."""
        if self.partition_column is None:
            raise LogSpecError(
                f"{self.spec.topic}: this normalizer keeps no partitions (partition_column)"
            )
        gone = pl.col(_PART) == partition
        removed = []
        for s in sorted({*self._mem, *self._spilled}):
            held = self._shard(s)
            self._mem[s] = held.filter(gone.not_().fill_null(True))
            removed.append(self._as_deletes(held.filter(gone)))
            self._spill_if_needed(set())
        return self._concat_deletes(removed)

    def _concat_deletes(self, removed: list[pa.Table]) -> pa.Table:
        return pa.concat_tables(removed) if removed else self._as_deletes(self._empty)

    def _as_deletes(self, rows: pl.DataFrame) -> pa.Table:
        out = rows.select(self.values).to_arrow()
        kinds = pa.repeat(pa.scalar("-D", pa.string()), out.num_rows)
        return self._conform(out).append_column(ROW_KIND, kinds)

    def clear(self) -> None:
        """Forget every key (the table was truncated)."""
        self._mem.clear()
        for path in self._spilled.values():
            path.unlink(missing_ok=True)
        self._spilled.clear()
        self._spilled_rows.clear()

    def close(self) -> None:
        self.clear()  # spilled shards are ours even inside a caller's spill_dir
        if self._own_dir and self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    # ------------------------------------------------------------------ process

    def _conform(self, table: pa.Table) -> pa.Table:
        for f in self.spec.schema:  # state shards and batches must agree on types
            i = table.schema.get_field_index(f.name)
            if table.schema.field(i).type != f.type:
                table = table.set_column(i, f.name, table.column(i).cast(f.type))
        return table

    def _with_shards(self, df: pl.DataFrame) -> pl.DataFrame:
        return df.with_columns(
            (pl.struct(self.key).hash(seed=7) % self.shards).cast(pl.Int64).alias(_SHARD)
        )

    def seed(self, rows: pa.Table | pa.RecordBatch) -> None:
        """Load existing rows as state without emitting anything (e.g. a table's committed
        rows when a consumer resumes from a snapshot). Needs every value column; a key
        seeded again (or seen in a later batch) replaces its row."""
        if rows.num_rows == 0:
            return
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
        missing = [c for c in self.values if c not in table.column_names]
        if missing:
            raise LogSpecError(f"{self.spec.topic}: seed rows lack columns {missing}")
        df = pl.from_arrow(self._conform(table.select(self.values)))
        assert isinstance(df, pl.DataFrame)
        df = self._with_shards(df.with_columns(pl.lit("+I").alias(ROW_KIND)).with_row_index(_IDX))
        touched = sorted(df[_SHARD].unique().to_list())
        self._update_state(self._with_partition(df), touched, self._held(touched))

    def process(self, table: pa.Table) -> pa.Table:
        """Normalize one batch (value columns, ``_row_kind`` and any meta columns)."""
        extra = [c for c in table.column_names if c not in self.values and c != ROW_KIND]
        self.unresolved = None
        if table.num_rows == 0:
            return table
        table = self._conform(table)
        df = pl.from_arrow(table)
        assert isinstance(df, pl.DataFrame)
        if ROW_KIND not in df.columns:
            df = df.with_columns(pl.lit("+I").alias(ROW_KIND))
        df = self._with_shards(df.filter(pl.col(ROW_KIND) != "-U"))
        # the touched shards' state, gathered once for the fill, the lookup and the update
        held = self._held(sorted(df[_SHARD].unique().to_list()))
        if self.fills_unavailable:
            df = self._fill_unavailable(df, held)
        df = df.with_row_index(_IDX)
        n = len(df)
        is_del = (df[ROW_KIND] == "-D").to_numpy()

        # previous row of the same key inside the batch
        prev = df.select(
            pl.col(_IDX).shift(1).over(self.key).alias("p"),
            pl.col(ROW_KIND).shift(1).over(self.key).alias("pk"),
        )
        prev_idx = prev["p"].to_numpy(allow_copy=True)
        first = prev["p"].is_null().to_numpy()
        prev_alive = (prev["pk"] != "-D").fill_null(False).to_numpy()

        # state lookup for each key's first row in this batch
        firsts = df.filter(pl.Series(first)).select([_IDX, *self.key])
        touched = sorted(df[_SHARD].unique().to_list())
        lookup = None
        if touched:
            state = held.select(self.values).with_columns(pl.lit(True).alias("__found"))
            lookup = firsts.join(state, on=self.key, how="left", nulls_equal=False).sort(_IDX)
        m = 0 if lookup is None else len(lookup)

        # prev image per row: in-batch previous row, or the state row
        base = df.select(self.values)
        images = (
            base
            if lookup is None
            else pl.concat([base, lookup.select(self.values)], how="vertical_relaxed")
        )
        pidx = np.where(first, 0, np.nan_to_num(prev_idx, nan=0)).astype(np.int64)
        if lookup is not None:
            pos = np.full(n, -1, dtype=np.int64)
            pos[lookup[_IDX].to_numpy()] = n + np.arange(m)
            pidx = np.where(first, pos, pidx)
            found = np.zeros(n, dtype=bool)
            found[lookup[_IDX].to_numpy()] = lookup["__found"].fill_null(False).to_numpy()
            prev_alive = np.where(first, found, prev_alive)
        else:
            prev_alive = np.where(first, False, prev_alive)
        prev_img = images[pidx]
        same = base.select(
            pl.all_horizontal([pl.col(c).eq_missing(prev_img[c]) for c in self.values])
        ).to_series()
        same_np = same.to_numpy()

        # counts: upsert -> 2 (changed: -U, +U; +U alone without full changelog),
        # 0 (identical), 1 (new); delete -> 1 (known) or 0
        changed = 2 if self.full_changelog else 1
        counts = np.where(
            is_del,
            prev_alive.astype(np.int64),
            np.where(prev_alive, np.where(same_np, 0, changed), 1),
        )
        rec = np.repeat(np.arange(n), counts)
        pos_in = np.arange(len(rec)) - np.repeat(np.cumsum(counts) - counts, counts)
        updated = ~is_del[rec] & prev_alive[rec]
        before = updated & (pos_in == 0) & (changed == 2)
        use_prev = is_del[rec] | before
        kind = np.where(is_del[rec], "-D", np.where(updated, np.where(before, "-U", "+U"), "+I"))
        out_vals = pl.concat([base, prev_img], how="vertical_relaxed")[
            np.where(use_prev, rec + n, rec)
        ]
        out = out_vals.with_columns(pl.Series(ROW_KIND, kind, dtype=pl.String))
        if extra:
            out = pl.concat([out, df.select(extra)[rec]], how="horizontal")

        self._update_state(self._with_partition(df), touched, held)
        result = out.to_arrow()
        target = pa.schema(
            [*self.spec.schema, pa.field(ROW_KIND, pa.string())]
            + [table.schema.field(c) for c in extra]
        )
        return result.select(target.names).cast(target)

    def _fill_unavailable(self, df: pl.DataFrame, held: pl.DataFrame) -> pl.DataFrame:
        """``df`` with its placeholders filled in from the batch and ``held`` (the state of
        its shards); the rows that cannot be filled go to ``unresolved`` (as given: they
        change nothing)."""
        df = fill_unavailable(df, self.key, self.values, held, ROW_KIND)
        bad = df[UNRESOLVED]
        self.unresolved = df.filter(bad).drop(UNRESOLVED, _SHARD).to_arrow() if bad.any() else None
        return df.filter(~bad).drop(UNRESOLVED)

    def _update_state(self, df: pl.DataFrame, touched: list[int], held: pl.DataFrame) -> None:
        """Each key's last row of the batch replaces its state row (a -D removes it) in the
        ``touched`` shards (``held``: their state, perhaps with more shards' rows)."""
        last = df.filter(pl.col(_IDX) == pl.col(_IDX).max().over(self.key))
        kept = held.join(last.select(self.key), on=self.key, how="anti")
        ups = last.filter(pl.col(ROW_KIND) != "-D").select([*self._kept, _SHARD])
        self._replace(pl.concat([kept, ups], how="vertical_relaxed"), touched)

    def _replace(self, state: pl.DataFrame, shards: list[int]) -> None:
        """``state`` (rows of ``shards``, with _SHARD) becomes those shards' state."""
        split = state.partition_by(_SHARD, as_dict=True)
        for s in shards:
            self._mem[s] = split.get((s,), self._empty)
        self._spill_if_needed(set(shards))


def at_truncate(removed: pa.Table, partition: int, offset: int) -> pa.Table:
    """A truncate's ``-D`` rows (``retract_*``) with the log position they take: its
    partition and offset, as decoded rows carry them."""
    n = removed.num_rows
    return removed.append_column(
        PARTITION_COLUMN, pa.repeat(pa.scalar(partition, pa.int32()), n)
    ).append_column(OFFSET_COLUMN, pa.repeat(pa.scalar(offset, pa.int64()), n))
