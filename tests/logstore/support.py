"""Shared helpers for the LogStore tests: schemas of every type, random changelogs."""

from __future__ import annotations

import datetime as dt
import decimal
import random
import uuid

import numpy as np
import pyarrow as pa

from logstore.codec import RawRecord
from logstore.encode import encode_batch
from logstore.spec import LogSpec

try:  # the FileStore's bucket hash when present (bridge injects the same one)
    from filestore.format.bucket import bucket_ids
except ImportError:  # pragma: no cover - local stand-in until filestore.format.bucket exists
    bucket_ids = None


def bucketer_for(spec: LogSpec):  # type: ignore[no-untyped-def]
    if bucket_ids is not None:
        return lambda t: bucket_ids(t, spec.key_columns, spec.buckets)

    def local(t: pa.Table) -> np.ndarray:
        keys = [str(r) for r in t.select(spec.key_columns).to_pylist()]
        return np.array([sum(k.encode()) % spec.buckets for k in keys], dtype=np.int32)

    return local


ALL_TYPES = pa.schema(
    [
        ("id", pa.int64()),
        ("i8", pa.int8()),
        ("i16", pa.int16()),
        ("i32", pa.int32()),
        ("u32", pa.uint32()),
        ("u64", pa.uint64()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("dec", pa.decimal128(18, 4)),
        ("s", pa.string()),
        ("ls", pa.large_string()),
        ("b", pa.binary()),
        ("flag", pa.bool_()),
        ("d", pa.date32()),
        ("tm", pa.time64("us")),
        ("ts", pa.timestamp("us")),
        ("ts_ms", pa.timestamp("ms")),
        ("ts_ns", pa.timestamp("ns")),
        ("tsz", pa.timestamp("us", tz="UTC")),
        ("tsz_paris", pa.timestamp("ms", tz="Europe/Paris")),
        ("li", pa.list_(pa.int32())),
        ("lb", pa.list_(pa.binary())),
        ("st", pa.struct([("x", pa.int32()), ("y", pa.string()), ("when", pa.date32())])),
        ("lst", pa.list_(pa.struct([("k", pa.string()), ("v", pa.float64())]))),
        # the rest of the FileStore's types (filestore/format/types.py)
        ("u8", pa.uint8()),
        ("f16", pa.float16()),
        ("dec256", pa.decimal256(40, 5)),
        ("lb2", pa.large_binary()),
        ("fb", pa.binary(4)),
        ("d64", pa.date64()),
        ("tm_s", pa.time32("s")),
        ("tm_ms", pa.time32("ms")),
        ("tm_ns", pa.time64("ns")),
        ("ts_s", pa.timestamp("s")),
        ("du", pa.duration("us")),
        ("du_s", pa.duration("s")),
        ("du_ns", pa.duration("ns")),
        ("ll", pa.large_list(pa.large_string())),
        ("m", pa.map_(pa.string(), pa.int64())),
        ("mi", pa.map_(pa.int32(), pa.struct([("d", pa.date32()), ("b", pa.binary())]))),
        ("md", pa.map_(pa.date32(), pa.list_(pa.decimal128(9, 3)))),
        ("st_m", pa.struct([("tags", pa.map_(pa.string(), pa.string())), ("n", pa.int16())])),
        ("nothing", pa.null()),
    ]
)

TRICKY = ['a"b', "back\\slash", "new\nline", "tab\t", "\x01ctl", "é ü 中文 🎉", "", "{}"]


def random_value(rng: random.Random, t: pa.DataType, allow_null: bool = True):  # type: ignore[no-untyped-def]
    if pa.types.is_null(t) or (allow_null and rng.random() < 0.15):
        return None
    if pa.types.is_uint8(t):
        return rng.randint(0, 255)
    if pa.types.is_float16(t):
        return float(np.float16(rng.uniform(-1000, 1000)))
    if pa.types.is_fixed_size_binary(t):
        return rng.randbytes(t.byte_width)
    if pa.types.is_large_binary(t):
        return rng.randbytes(rng.randint(0, 12))
    if pa.types.is_time(t) or pa.types.is_duration(t):
        per_s = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[t.unit]
        if pa.types.is_duration(t):
            return rng.randint(-(2**40), 2**40) * per_s // 1000 + rng.randint(0, per_s - 1)
        return rng.randrange(86400 * per_s)
    if pa.types.is_map(t):
        keys = {random_value(rng, t.key_type, allow_null=False) for _ in range(rng.randint(0, 3))}
        return [(k, random_value(rng, t.item_type)) for k in keys]
    if pa.types.is_large_list(t):
        return [random_value(rng, t.value_type) for _ in range(rng.randint(0, 3))]
    if pa.types.is_int8(t):
        return rng.randint(-128, 127)
    if pa.types.is_int16(t):
        return rng.randint(-(2**15), 2**15 - 1)
    if pa.types.is_int32(t):
        return rng.randint(-(2**31), 2**31 - 1)
    if pa.types.is_uint32(t):
        return rng.randint(0, 2**32 - 1)
    if pa.types.is_uint64(t):
        return rng.randint(0, 2**64 - 1)
    if pa.types.is_int64(t):
        return rng.randint(-(2**63), 2**63 - 1)
    if pa.types.is_float32(t):
        return float(np.float32(rng.uniform(-1e6, 1e6)))
    if pa.types.is_floating(t):
        return rng.choice([rng.uniform(-1e12, 1e12), 1e-300, -0.0, 1 / 3])
    if pa.types.is_decimal(t):
        digits = 10 ** (t.precision - 1)
        return decimal.Decimal(rng.randint(-digits, digits)).scaleb(-t.scale)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return rng.choice(TRICKY) + str(rng.randint(0, 10**6))
    if pa.types.is_binary(t):
        return rng.randbytes(rng.randint(0, 12))
    if pa.types.is_boolean(t):
        return rng.random() < 0.5
    if pa.types.is_date(t):
        return dt.date(1970, 1, 1) + dt.timedelta(days=rng.randint(-30000, 30000))
    if pa.types.is_timestamp(t):
        scale = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[t.unit]
        return rng.randint(-(2**31), 2**32) * scale + rng.randint(0, scale - 1)
    if pa.types.is_list(t):
        return [random_value(rng, t.value_type) for _ in range(rng.randint(0, 3))]
    if pa.types.is_struct(t):
        return {f.name: random_value(rng, f.type) for f in t}
    raise NotImplementedError(t)


def random_rows(rng: random.Random, schema: pa.Schema, ids: list[int]) -> pa.Table:
    cols = {}
    for f in schema:
        if f.name == "id":
            cols[f.name] = pa.array(ids, f.type)
        else:
            cols[f.name] = pa.array([random_value(rng, f.type) for _ in ids], f.type)
    return pa.table(cols, schema=schema)


def random_changelog(rng: random.Random, schema: pa.Schema, n_keys: int, steps: int) -> pa.Table:
    """+I for new keys, -U/+U pairs for updates, -D for deletes, in one valid sequence."""
    keys = [rng.randrange(n_keys) for _ in range(steps)]
    fresh = random_rows(rng, schema, keys)  # candidate row i carries key keys[i]
    live: dict[int, int] = {}  # key -> index of its current row in `fresh`
    take: list[int] = []
    kinds: list[str] = []
    for i, k in enumerate(keys):
        if k not in live:
            take.append(i)
            kinds.append("+I")
            live[k] = i
        elif rng.random() < 0.3:
            take.append(live.pop(k))
            kinds.append("-D")
        else:
            take += [live[k], i]
            kinds += ["-U", "+U"]
            live[k] = i
    table = fresh.take(pa.array(take, pa.int64()))
    return table.append_column("_row_kind", pa.array(kinds, pa.string()))


def unique_topic(prefix: str = "t") -> str:
    return f"dts.test.{prefix}_{uuid.uuid4().hex[:10]}"


def as_records(spec: LogSpec, table: pa.Table, start_offset: int = 0) -> list[RawRecord]:
    enc = encode_batch(table, spec, bucketer_for(spec), ts_ms=1)
    return [
        RawRecord(int(p), start_offset + i, k.encode(), v.encode())
        for i, (p, k, v) in enumerate(
            zip(enc.partitions, enc.keys.to_pylist(), enc.values.to_pylist(), strict=True)
        )
    ]


def strip_meta(table: pa.Table) -> pa.Table:
    return table.drop_columns(
        [c for c in ("_partition", "_offset", "_barrier") if c in table.column_names]
    )


def assert_tables_equal(got: pa.Table, want: pa.Table) -> None:
    """Column-by-column equality with a readable first difference."""
    assert got.schema == want.schema, f"schemas differ:\n{got.schema}\nvs\n{want.schema}"
    assert got.num_rows == want.num_rows, (got.num_rows, want.num_rows)
    for name in want.column_names:
        a, b = got.column(name), want.column(name)
        if not a.equals(b):
            for i in range(len(b)):
                if not a[i].equals(b[i]):
                    raise AssertionError(f"column {name!r} row {i}: got {a[i]!r}, want {b[i]!r}")
