"""Reads that need no merge go through polars' Parquet reader (``filestore.read._polars_parquet``).

Every type ``polars_exact`` admits comes back exactly as written (extremes, nulls, time
zones, decimals); types it does not admit stay with pyarrow and come back exactly too;
deletion vectors, retractions, partition directories and a damaged file behave as on
the pyarrow path. Real tables on real files.
"""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from filestore import Catalog, Table
from filestore.errors import DataFileUnreadable
from filestore.read._polars_parquet import polars_exact
from filestore.read.split import SplitReader

EXACT = {
    "b": (pa.bool_(), [True, None, False]),
    "i8": (pa.int8(), [-128, None, 127]),
    "u32": (pa.uint32(), [0, None, 2**32 - 1]),
    "u64": (pa.uint64(), [0, None, 2**64 - 1]),
    "f32": (pa.float32(), [1.5, None, -0.0]),
    "f64": (pa.float64(), [1e308, None, -2.5]),
    "s": (pa.string(), ["", None, "é\x00z"]),
    "ls": (pa.large_string(), ["a", None, "b" * 1000]),
    "bin": (pa.binary(), [b"\x00\xff", None, b""]),
    "d": (pa.date32(), [dt.date(1, 1, 1), None, dt.date(9999, 12, 31)]),
    "ms": (pa.timestamp("ms"), [0, None, -1]),
    "us_tz": (pa.timestamp("us", tz="Europe/Berlin"), [0, None, 2**50]),
    "ns_utc": (pa.timestamp("ns", tz="UTC"), [1, None, -5]),
    "t64": (pa.time64("us"), [1, None, 86_399_999_999]),
    "dec": (
        pa.decimal128(38, 6),
        [decimal.Decimal("-5368.38"), None, decimal.Decimal("9" * 32 + ".123456")],
    ),
}
NOT_EXACT = {
    "t32": (pa.time32("s"), [1, None, 86_399]),
    "sec": (pa.timestamp("s"), [0, None, 10**10]),
    "dur": (pa.duration("ms"), [5, None, -7]),
    "tags": (pa.list_(pa.string()), [["a"], None, []]),
}


def _table(tmp_path: Path, columns: dict[str, tuple[pa.DataType, list[object]]]) -> Table:
    fields = [pa.field("id", pa.int64(), nullable=False)]
    fields += [pa.field(name, t) for name, (t, _) in columns.items()]
    return Catalog(str(tmp_path)).create_table(
        "db.t",
        pa.schema(fields),
        primary_key=["id"],
        options={"bucket": "2", "deletion-vectors.enabled": "true"},
    )


def _rows(
    t: Table, ids: list[int], columns: dict[str, tuple[pa.DataType, list[object]]]
) -> pa.Table:
    """Row i of ``ids`` takes value i % 3 of every column."""
    arrays = [pa.array(ids, pa.int64())]
    arrays += [
        pa.array([vals[i % 3] for i in range(len(ids))], typ) for typ, vals in columns.values()
    ]
    return pa.Table.from_arrays(arrays, schema=t.arrow_schema)


def _commit(t: Table, rows: pa.Table) -> None:
    w = t.new_write("w")
    w.write(rows)
    w.commit()
    w.close()


def _whole_file_reads(t: Table) -> list[bool]:
    """Per split: whether the read took polars' whole-file path."""
    reader = SplitReader(t, t.schema)
    return [reader._read_merge_free(s) is not None for s in t.new_scan().plan()]


def test_every_exact_type_reads_back_as_written_through_polars(tmp_path: Path) -> None:
    assert all(polars_exact(t) for t, _ in EXACT.values())
    t = _table(tmp_path, EXACT)
    _commit(t, _rows(t, list(range(12)), EXACT))
    # keys 0..5 written again with the values shifted: deletion vectors drop the old rows
    second = _rows(t, list(range(6)), EXACT)
    second = pa.Table.from_arrays(
        [second.column(0), *(c.take([(i + 1) % 6 for i in range(6)]) for c in second.columns[1:])],
        schema=t.arrow_schema,
    )
    _commit(t, second)
    assert _whole_file_reads(t) == [True, True]
    want = pa.concat_tables([second, _rows(t, list(range(12)), EXACT).slice(6)]).sort_by("id")
    got = t.read().sort_by("id")
    assert got.schema == t.arrow_schema
    assert got.equals(want)


def test_types_polars_cannot_return_exactly_stay_with_pyarrow(tmp_path: Path) -> None:
    assert not any(polars_exact(t) for t, _ in NOT_EXACT.values())
    t = _table(tmp_path, NOT_EXACT)
    rows = _rows(t, list(range(9)), NOT_EXACT)
    _commit(t, rows)
    assert _whole_file_reads(t) == [False, False]
    assert t.read().sort_by("id").equals(rows)
    # durations have statistics too (min_max has no kernel of its own for them)
    negative = t.read(filter=pc.field("dur") < pa.scalar(0, pa.duration("ms")))
    assert sorted(negative.column("id").to_pylist()) == [2, 5, 8]
    # a projection without the inexact columns may take polars' path
    assert t.read(columns=["id"]).sort_by("id").column("id").to_pylist() == list(range(9))


def test_retractions_and_partition_directories(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("p", pa.string(), nullable=False),
            pa.field("v", pa.int64()),
        ]
    )
    t = Catalog(str(tmp_path)).create_table(
        "db.parts",
        schema,
        primary_key=["id", "p"],
        partition_by=["p"],
        options={"bucket": "1", "deletion-vectors.enabled": "true"},
    )
    # partition values that a glob or a hive reader would take for something else
    values = ["a=b", "x[1]*?"]
    rows = pa.table(
        {"id": list(range(8)), "p": [values[i % 2] for i in range(8)], "v": list(range(8))},
        schema=schema,
    )
    _commit(t, rows)
    w = t.new_write("w")
    w.write(
        pa.table(
            {
                "id": [0, 1],
                "p": [values[0], values[1]],
                "v": [None, None],
                "_row_kind": ["-D", "-D"],
            }
        )
    )
    w.commit()
    w.close()
    assert all(_whole_file_reads(t))
    got = t.read().sort_by("id")
    assert got.column_names == ["id", "p", "v"]
    assert got.equals(rows.slice(2))


def test_a_damaged_data_file_names_itself(tmp_path: Path) -> None:
    t = _table(tmp_path, {"s": EXACT["s"]})
    _commit(t, _rows(t, list(range(4)), {"s": EXACT["s"]}))
    split = next(s for s in t.new_scan().plan() if s.files)
    path = Path(SplitReader(t, t.schema)._path(split, split.files[0]))
    path.write_bytes(b"not parquet at all")
    with pytest.raises(DataFileUnreadable, match=path.name):
        t.read()
