"""The bucket hash must never change: fixed expected values and a pure-Python reference."""

from __future__ import annotations

import datetime as dt
import decimal
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from filestore.format.bucket import bucket_ids, key_hash

MASK = 2**64 - 1


def fnv1a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def canonical(value: object) -> bytes:
    if value is None:
        return b"\xff"
    if isinstance(value, bool):
        return bytes([int(value)])
    if isinstance(value, int):
        return struct.pack("<q", value)
    if isinstance(value, float):
        return struct.pack("<d", value + 0.0)
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes):
        return value
    raise TypeError(value)


def reference(rows: list[tuple[object, ...]]) -> list[int]:
    out = []
    for row in rows:
        h = 0
        for v in row:
            h = (h * 31 + fnv1a(canonical(v))) & MASK
        out.append(h)
    return out


def test_fixed_values_never_change() -> None:
    table = pa.table(
        {
            "i": pa.array([1, -1, 0, None, 2**40], pa.int64()),
            "s": pa.array(["a", "", "héllo", None, "key-12345"]),
        }
    )
    assert key_hash(table, ["i"]).tolist() == [
        9929646806074584996,
        10157053723145373757,
        12161962213042174405,
        12638352127299873646,
        11537796949662120730,
    ]
    assert key_hash(table, ["s"]).tolist() == [
        12638187200555641996,
        14695981039346656037,
        11772399666002542816,
        12638352127299873646,
        3748520866394460186,
    ]
    assert key_hash(table, ["i", "s"]).tolist() == [
        6862588935805399400,
        15969997203790865032,
        1411602722409365435,
        17045642525695372736,
        10932088905438722112,
    ]
    assert bucket_ids(table, ["i", "s"], 4).tolist() == [0, 0, 3, 0, 0]
    assert bucket_ids(table, ["i"], 7).tolist() == [1, 6, 5, 0, 5]


def test_matches_reference_for_mixed_types() -> None:
    rows = [(5, "x", True, 1.5, b"\x00\x01"), (-3, "日本", False, -0.0, b""), (None,) * 5]
    table = pa.table(
        {
            "a": pa.array([r[0] for r in rows], pa.int32()),
            "b": pa.array([r[1] for r in rows], pa.large_string()),
            "c": pa.array([r[2] for r in rows], pa.bool_()),
            "d": pa.array([r[3] for r in rows], pa.float32()),
            "e": pa.array([r[4] for r in rows], pa.binary()),
        }
    )
    assert key_hash(table, list("abcde")).tolist() == reference(rows)


def test_widths_and_temporal_types_hash_as_int64() -> None:
    day = dt.date(2024, 1, 2)
    days = (day - dt.date(1970, 1, 1)).days
    for typ in (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint32()):
        t = pa.table({"k": pa.array([1, 2, None], typ)})
        assert key_hash(t, ["k"]).tolist() == reference([(1,), (2,), (None,)])
    t = pa.table({"d": pa.array([day], pa.date32()), "ts": pa.array([days], pa.int64())})
    assert key_hash(t, ["d"]).tolist() == key_hash(t, ["ts"]).tolist()
    ts = pa.array([1_700_000_000_000_000], pa.timestamp("us", tz="UTC"))
    assert key_hash(pa.table({"t": ts}), ["t"]).tolist() == reference([(1_700_000_000_000_000,)])
    # -0.0 and 0.0 are one key
    f = pa.table({"f": pa.array([0.0, -0.0])})
    assert len(set(key_hash(f, ["f"]).tolist())) == 1


def test_decimal_hashes_its_canonical_string() -> None:
    t = pa.table({"d": pa.array([decimal.Decimal("1.50")], pa.decimal128(10, 2))})
    assert key_hash(t, ["d"]).tolist() == reference([("1.50",)])


def test_chunked_dictionary_and_slices() -> None:
    values = ["p", "q", None, "p", "r"]
    plain = pa.table({"k": pa.array(values)})
    chunked = pa.table({"k": pa.chunked_array([values[:2], values[2:]])})
    dictionary = pa.table({"k": pa.array(values).dictionary_encode()})
    sliced = pa.table({"k": pa.array(["zz", *values])}).slice(1)
    expected = reference([(v,) for v in values])
    for t in (plain, chunked, dictionary, sliced):
        assert key_hash(t, ["k"]).tolist() == expected


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), st.text(max_size=12)),
        max_size=40,
    ),
    st.integers(1, 16),
)
def test_random_rows_match_reference(rows: list[tuple[int | None, str]], buckets: int) -> None:
    table = pa.table(
        {"i": pa.array([r[0] for r in rows], pa.int64()), "s": pa.array([r[1] for r in rows])}
    )
    expected = reference(rows)
    assert key_hash(table, ["i", "s"]).tolist() == expected
    assert bucket_ids(table, ["i", "s"], buckets).tolist() == [h % buckets for h in expected]
    assert bucket_ids(table, ["i", "s"], buckets).dtype == np.int32


@pytest.mark.parametrize("high", [0, 1, 255, 256, 65_535, 2**24, 2**40, 2**62, 2**63 - 1])
def test_small_non_negative_keys_match_reference(high: int) -> None:
    # values whose high bytes are all zero take a shortcut; it must hash the same
    rng = np.random.default_rng(high % 1000)
    values = [0, high, *(int(v) for v in rng.integers(0, high + 1, 200, dtype=np.uint64))]
    for t in (pa.int64(), pa.uint64() if high >= 2**62 else pa.int32() if high < 2**31 else None):
        if t is None:
            continue
        table = pa.table({"k": pa.array(values, t)})
        assert key_hash(table, ["k"]).tolist() == reference([(v,) for v in values])


def test_bad_arguments() -> None:
    t = pa.table({"k": [1]})
    with pytest.raises(ValueError):
        bucket_ids(t, ["k"], 0)
    with pytest.raises(ValueError):
        bucket_ids(t, [], 2)
