"""The fast paths of the hot code (numpy integer-key sort, column pruning, Parquet
options, parallel flush/read) agree with plain-Python oracles, including the
cases they special-case: ties, out-of-sequence runs, composite and string keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from filestore import Catalog
from filestore.format.data_file import compute_value_stats, deserialize_batch
from filestore.format.row_kind import DELETE, INSERT, SEQUENCE_NUMBER, VALUE_KIND
from filestore.read.merge import sort_order, winner_indices


def _kv(keys: list[Any], seqs: list[int], kinds: list[int], key_type: pa.DataType) -> pa.Table:
    return pa.table(
        {
            "_KEY_k": pa.array(keys, key_type),
            SEQUENCE_NUMBER: pa.array(seqs, pa.int64()),
            VALUE_KIND: pa.array(kinds, pa.int8()),
        }
    )


def _oracle(keys: list[Any], seqs: list[int], kinds: list[int], drop: bool) -> list[int]:
    """Index of each key's highest-sequence row, keys ascending (deletes dropped if asked)."""
    best: dict[Any, int] = {}
    for i, (k, s) in enumerate(zip(keys, seqs, strict=True)):
        if k not in best or s > seqs[best[k]]:
            best[k] = i
    return [best[k] for k in sorted(best) if not (drop and kinds[best[k]] == DELETE)]


@pytest.mark.parametrize("key_type", [pa.int64(), pa.int32(), pa.uint16(), pa.string()])
@pytest.mark.parametrize("layout", ["random", "sorted-runs", "unique", "interleaved-seq"])
def test_winners_match_oracle(key_type: pa.DataType, layout: str) -> None:
    rng = np.random.default_rng(7)
    n = 3000
    if layout == "unique":
        raw = rng.permutation(n)
    elif layout == "sorted-runs":  # what a read of several flushed runs concatenates
        raw = np.concatenate([np.sort(rng.choice(2000, 600, replace=False)) for _ in range(5)])
    else:
        raw = rng.integers(0, 500, n)
    n = len(raw)
    keys = [int(k) if key_type != pa.string() else f"k{k:05d}" for k in raw]
    in_order = layout != "interleaved-seq"
    seqs = list(range(n)) if in_order else [int(s) for s in rng.permutation(n)]
    kinds = [int(k) for k in rng.choice([INSERT, INSERT, INSERT, DELETE], n)]
    table = _kv(keys, seqs, kinds, key_type)
    for drop in (True, False):
        got = winner_indices(table, ["_KEY_k"], drop_deletes=drop, in_order=in_order).tolist()
        assert got == _oracle(keys, seqs, kinds, drop)
    order = sort_order(table, ["_KEY_k"], in_sequence_order=in_order)
    ordered = [(keys[i], seqs[i]) for i in order]
    assert ordered == sorted(ordered)


def _read_rows(t: Any, columns: list[str] | None = None) -> list[dict[str, Any]]:
    return sorted(t.read(columns=columns).to_pylist(), key=lambda r: tuple(map(str, r.values())))


def test_composite_and_string_keys_merge_across_runs(warehouse: Path) -> None:
    schema = pa.schema([("region", pa.string()), ("id", pa.int64()), ("v", pa.float64())])
    t = Catalog(str(warehouse)).create_table(
        "db.ck", schema, primary_key=["region", "id"], options={"bucket": "3"}
    )
    oracle: dict[tuple[str, int], float] = {}
    rng = np.random.default_rng(3)
    w = t.new_write("w")
    for _step in range(6):
        regions = rng.choice(["eu", "us", "ap"], 400).tolist()
        ids = rng.integers(0, 150, 400).tolist()
        vals = rng.random(400).tolist()
        kinds = rng.choice(["+I", "+U", "-D"], 400, p=[0.5, 0.3, 0.2]).tolist()
        w.write(pa.table({"region": regions, "id": ids, "v": vals, "_row_kind": kinds}))
        for r, i, v, k in zip(regions, ids, vals, kinds, strict=True):
            if k == "-D":
                oracle.pop((r, i), None)
            else:
                oracle[(r, i)] = v
        w.commit()
    w.close()
    expected = sorted(
        ({"region": r, "id": i, "v": v} for (r, i), v in oracle.items()),
        key=lambda r: tuple(map(str, r.values())),
    )
    assert _read_rows(t) == expected
    # projections that leave out key columns, and one of only a key column
    assert sorted(t.read(columns=["v"]).column("v").to_pylist()) == sorted(oracle.values())
    assert sorted(t.read(columns=["id"]).column("id").to_pylist()) == sorted(i for _, i in oracle)
    # each bucket's output is in key order
    for split in t.new_scan().plan():
        rows = pa.Table.from_batches(list(t.read_split(split))).to_pylist()
        keys = [(r["region"], r["id"]) for r in rows]
        assert keys == sorted(keys)


def test_data_files_use_plain_delta_encoding_for_keys(warehouse: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("x", pa.float64()), ("s", pa.string())])
    t = Catalog(str(warehouse)).create_table("db.enc", schema, primary_key=["id"])
    w = t.new_write("w")
    w.write(pa.table({"id": list(range(1000)), "x": [0.5] * 1000, "s": ["a", "b"] * 500}))
    w.commit()
    (split,) = t.new_scan().plan()
    (f,) = split.files
    path = t.paths.data_file([], (), split.bucket, f.file_name)
    meta = pq.ParquetFile(path).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(6)}
    assert "DELTA_BINARY_PACKED" in encodings["_KEY_id"]
    assert "DELTA_BINARY_PACKED" in encodings[SEQUENCE_NUMBER]
    assert "RLE_DICTIONARY" not in encodings["x"]  # floats are rarely repeated
    # Spark 4.2's vectorized reader refuses BYTE_STREAM_SPLIT (test_spark_own_parquet_reader...)
    assert "BYTE_STREAM_SPLIT" not in encodings["x"] and "PLAIN" in encodings["x"]
    assert "RLE_DICTIONARY" in encodings["s"]
    assert t.read().num_rows == 1000


@pytest.mark.parametrize("row_group_size", [None, 3])
def test_string_stats_from_the_footer_equal_computed_ones(row_group_size: int | None) -> None:
    # nested columns before a string column shift its footer position; several row
    # groups (one all-null) make the footer bounds a combination or unusable
    data = pa.table(
        {
            "m": pa.array(
                [{"a": 1}, None, {"b": 2}, None, None, {"c": 3}, None],
                pa.map_(pa.string(), pa.int64()),
            ),
            "st": pa.array([{"x": "q", "y": 1}] * 7),
            "s": ["zz", None, "ab\u00e9", None, None, None, "m"],
            "b": pa.array([b"\xff", b"\x00", None, b"a", b"b", b"c", b"d"]),
            "big": ["x" * 5000, "y", "z", "a", "b", "c", "d"],  # too long for footer stats
        }
    )
    footer: list[pq.FileMetaData] = []
    pq.write_table(
        data, pa.BufferOutputStream(), row_group_size=row_group_size, metadata_collector=footer
    )
    columns = ["s", "b", "big"]
    with_footer = deserialize_batch(compute_value_stats(data, columns, footer[0])[0])
    computed = deserialize_batch(compute_value_stats(data, columns)[0])
    assert with_footer.equals(computed)
    assert with_footer.column(0).to_pylist() == ["ab\u00e9", "zz"]


def test_key_range_reads_skip_row_groups_and_match_the_merge(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter on the key drops rows before the merge and skips row groups by their key
    statistics; the rows are those of the full merge-read, filtered. A filter on a value
    column is applied after the merge only (an older version must not win)."""
    import filestore.format.data_file as data_file
    import filestore.read.split as read

    monkeypatch.setattr(data_file, "ROW_GROUP_ROWS", 1000)  # many groups per file
    schema = pa.schema([("id", pa.int64()), ("v", pa.int64())])
    t = Catalog(str(warehouse)).create_table("db.kr", schema, primary_key=["id"])
    rng = np.random.default_rng(5)
    w = t.new_write("w")
    w.write(pa.table({"id": rng.permutation(20_000), "v": np.zeros(20_000, np.int64)}))
    w.commit()
    for step in range(1, 4):  # overlapping upserts: every key range needs a merge
        ids = rng.choice(20_000, 5_000, replace=False)
        w.write(pa.table({"id": ids, "v": np.full(5_000, step, np.int64)}))
        w.commit()
    w.close()
    whole = t.read()
    key_range = (pc.field("id") >= 7_000) & (pc.field("id") < 7_500)
    for filter in (key_range, pc.field("v") == 0, key_range & (pc.field("v") == 3)):
        got = t.read(filter=filter).sort_by("id")
        assert got.equals(whole.filter(filter).sort_by("id")), filter
    # the key range reads a few row groups of each file, not all of them
    reader = read.SplitReader(t, t.schema, filter=key_range)
    (split,) = t.new_scan(filter=key_range).plan()
    for f in split.files:
        meta = pq.ParquetFile(t.paths.data_file([], (), split.bucket, f.file_name)).metadata
        kept = reader._matching_row_groups(meta)
        assert meta.num_row_groups >= 5 and 1 <= len(kept) <= 2, (meta.num_row_groups, kept)
    assert read.key_filter(pc.field("v") == 0, t.schema) is None
    assert read.key_filter(key_range & (pc.field("v") == 3), t.schema) is None
