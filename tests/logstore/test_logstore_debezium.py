"""Debezium's own value forms on read, with hand-written records (no broker).

Real connectors write dates as epoch days, times/timestamps as integers, decimals
as base64 unscaled bytes; with ``debezium-json.schema-include`` the schema names
the semantic type of each field. Also: maps and durations both ways.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import random

import orjson
import pyarrow as pa
import pytest

from logstore.codec import RawRecord, decode_records
from logstore.encode import encode_batch
from logstore.errors import DecodeError
from logstore.spec import LogSpec
from tests.logstore.support import as_records, assert_tables_equal, random_changelog, strip_meta

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("born", pa.date32()),
        ("seen_ms", pa.timestamp("ms")),
        ("seen_us", pa.timestamp("us")),
        ("at", pa.time64("us")),
        ("zoned", pa.timestamp("us", tz="UTC")),
        ("price", pa.decimal128(10, 2)),
        ("took", pa.duration("us")),
    ]
)
DAY = dt.date(2024, 2, 29)
DAYS = (DAY - dt.date(1970, 1, 1)).days
WHEN = dt.datetime(2024, 2, 29, 13, 14, 15, 123456)
WHEN_US = int((WHEN - dt.datetime(1970, 1, 1)) / dt.timedelta(microseconds=1))
WHEN_MS = WHEN_US // 1000


def b64_decimal(value: str, scale: int) -> str:
    with decimal.localcontext(prec=60):  # the default 28 digits would round 38-digit values
        unscaled = int(decimal.Decimal(value).scaleb(scale))
    n = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(n, "big", signed=True)).decode()


def debezium_schema(fields: list[dict]) -> dict:
    image = {"type": "struct", "optional": True, "name": "db.inventory.t.Value", "fields": fields}
    return {
        "type": "struct",
        "name": "db.inventory.t.Envelope",
        "fields": [
            {**image, "field": "before"},
            {**image, "field": "after"},
            {"type": "struct", "field": "source", "fields": [{"type": "string", "field": "db"}]},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }


FIELDS = [
    {"type": "int64", "optional": False, "field": "id"},
    {
        "type": "int32",
        "optional": True,
        "name": "io.debezium.time.Date",
        "version": 1,
        "field": "born",
    },
    {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "field": "seen_ms"},
    {
        "type": "int64",
        "optional": True,
        "name": "io.debezium.time.MicroTimestamp",
        "field": "seen_us",
    },
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTime", "field": "at"},
    {
        "type": "string",
        "optional": True,
        "name": "io.debezium.time.ZonedTimestamp",
        "field": "zoned",
    },
    {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": "2", "connect.decimal.precision": "10"},
        "field": "price",
    },
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroDuration", "field": "took"},
]


def row(i: int, price: str = "12.34") -> dict:
    return {
        "id": i,
        "born": DAYS,
        "seen_ms": WHEN_MS,
        "seen_us": WHEN_US,
        "at": (13 * 3600 + 14 * 60 + 15) * 10**6 + 123456,
        "zoned": "2024-02-29T13:14:15.123456Z",
        "price": b64_decimal(price, 2),
        "took": 5000,
    }


def expected(i: int, price: str = "12.34") -> dict:
    return {
        "id": i,
        "born": DAY,
        "seen_ms": WHEN.replace(microsecond=123000),
        "seen_us": WHEN,
        "at": dt.time(13, 14, 15, 123456),
        "zoned": WHEN.replace(tzinfo=dt.UTC),
        "price": decimal.Decimal(price),
        "took": dt.timedelta(microseconds=5000),
    }


def with_schema(payload: dict, fields: list[dict] = FIELDS) -> bytes:
    return orjson.dumps({"schema": debezium_schema(fields), "payload": payload})


def values_of(table: pa.Table) -> list[dict]:
    return table.select(SCHEMA.names).to_pylist()


def test_schema_include_semantic_types() -> None:
    spec = LogSpec("dbz.t", SCHEMA, ["id"], 1, changelog_mode="all")
    recs = [
        RawRecord(0, 0, None, with_schema({"before": None, "after": row(1), "op": "r"})),
        RawRecord(0, 1, None, with_schema({"before": None, "after": row(2, "-0.01"), "op": "c"})),
        RawRecord(
            0,
            2,
            None,
            with_schema({"before": row(2, "-0.01"), "after": row(2, "99999999.99"), "op": "u"}),
        ),
    ]
    out = decode_records(recs, spec).table
    assert out["_row_kind"].to_pylist() == ["+I", "+I", "-U", "+U"]
    assert values_of(out) == [
        expected(1),
        expected(2, "-0.01"),
        expected(2, "-0.01"),
        expected(2, "99999999.99"),
    ]


def test_key_only_delete_with_schema_include_key() -> None:
    spec = LogSpec("dbz.t", SCHEMA, ["id"], 1)
    key = orjson.dumps({"schema": {"type": "struct", "fields": []}, "payload": {"id": 7}})
    value = with_schema({"before": None, "after": None, "op": "d"})
    out = decode_records([RawRecord(0, 0, key, value)], spec).table
    assert out.select(["id", "born", "_row_kind"]).to_pylist() == [
        {"id": 7, "born": None, "_row_kind": "-D"}
    ]


def test_integers_without_schema_follow_the_column_type() -> None:
    """No schema: days for dates, the column's own unit for times and timestamps."""
    spec = LogSpec("dbz.t", SCHEMA, ["id"], 1)
    image = {**row(1), "price": "12.34", "seen_us": WHEN_US, "zoned": WHEN_US}
    recs = [RawRecord(0, 0, None, orjson.dumps({"after": image, "op": "c"}))]
    out = values_of(decode_records(recs, spec).table)
    assert out == [expected(1)]


def test_mixed_forms_in_one_batch_each_read_right() -> None:
    """Our ISO records and Debezium integer records interleaved: nothing lost, nothing misread."""
    spec = LogSpec("dbz.t", SCHEMA, ["id"], 1)
    ours = as_records(spec, pa.Table.from_pylist([expected(1)], schema=SCHEMA))[0].value
    theirs = orjson.dumps({"after": {**row(2), "price": "12.34"}, "op": "c"})
    schema_ms = [
        f if f["field"] != "seen_us" else {**f, "name": "io.debezium.time.Timestamp"}
        for f in FIELDS
    ]
    other_unit = with_schema({"after": {**row(3), "seen_us": WHEN_MS}, "op": "c"}, fields=schema_ms)
    values = [ours, theirs, with_schema({"after": row(4), "op": "c"}), other_unit, ours, theirs]
    recs = [RawRecord(0, i, None, v) for i, v in enumerate(values)]
    out = decode_records(recs, spec).table
    want = [expected(i) for i in (1, 2, 4, 3, 1, 2)]
    want[3]["seen_us"] = WHEN.replace(microsecond=123000)  # sent as millis, read as millis
    assert out["_offset"].to_pylist() == [0, 1, 2, 3, 4, 5]
    assert values_of(out) == want


def test_base64_decimal_without_schema_is_an_error_not_a_guess() -> None:
    spec = LogSpec("dbz.t", SCHEMA, ["id"], 1)
    value = orjson.dumps({"after": {"id": 1, "price": "BNI="}, "op": "c"})
    with pytest.raises(DecodeError, match="wrong type"):
        decode_records([RawRecord(0, 0, None, value)], spec)


def test_lossy_debezium_values_are_errors() -> None:
    spec = LogSpec("dbz.t", SCHEMA, ["id"], 1)
    ms_into_date = with_schema(
        {"after": {"id": 1, "born": WHEN_MS}, "op": "c"},
        fields=[{**FIELDS[1], "name": "io.debezium.time.Timestamp"}],
    )
    bad_time = orjson.dumps({"after": {"id": 2, "at": 86400 * 10**6}, "op": "c"})
    micros_into_ms = with_schema(  # MicroTimestamp with micros into a timestamp[ms] column
        {"after": {"id": 3, "seen_ms": WHEN_US}, "op": "c"},
        fields=[{**FIELDS[3], "field": "seen_ms"}],
    )
    recs = [
        RawRecord(0, i, None, v) for i, v in enumerate([ms_into_date, bad_time, micros_into_ms])
    ]
    d = decode_records(recs, spec, lenient=True)
    assert d.table.num_rows == 0
    assert [e.offset for e in d.errors] == [0, 1, 2]
    assert all(e.reason.startswith("wrong type") for e in d.errors), d.errors


# --------------------------------------------------------------------------- maps and durations


MAPS = pa.schema(
    [
        ("id", pa.int64()),
        ("tags", pa.map_(pa.string(), pa.int64())),
        ("by_id", pa.map_(pa.int32(), pa.list_(pa.date32()))),
        ("took", pa.duration("ms")),
        ("took_ns", pa.duration("ns")),
    ]
)


def test_map_and_duration_wire_forms() -> None:
    spec = LogSpec("t", MAPS, ["id"], 1)
    rows = pa.Table.from_pylist(
        [
            {
                "id": 1,
                "tags": [("a", 1), ("b", None)],
                "by_id": [(7, [dt.date(2020, 1, 2)])],
                "took": dt.timedelta(milliseconds=5),
                "took_ns": -1_500_000_000,
            }
        ],
        schema=MAPS,
    )
    enc = encode_batch(rows, spec, lambda t: pa.array([0] * t.num_rows).to_numpy(), ts_ms=1)
    after = orjson.loads(enc.values[0].as_py())["after"]
    assert after == {
        "id": 1,
        "tags": {"a": 1, "b": None},
        "by_id": {"7": ["2020-01-02"]},
        "took": "PT0.005S",
        "took_ns": "-PT1.5S",
    }
    out = decode_records([RawRecord(0, 0, None, enc.values[0].as_py().encode())], spec).table
    assert_tables_equal(out.select(MAPS.names), rows)


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("P1DT2H3M4.5S", ((26 * 60 + 3) * 60 + 4) * 10**6 + 500000),
        ("-PT0S", 0),
        ("PT10M", 6 * 10**8),
    ],
)
def test_iso_durations_with_days_hours_minutes(text: str, micros: int) -> None:
    spec = LogSpec("t", pa.schema([("id", pa.int64()), ("d", pa.duration("us"))]), ["id"], 1)
    value = orjson.dumps({"after": {"id": 1, "d": text}, "op": "c"})
    out = decode_records([RawRecord(0, 0, None, value)], spec).table
    assert out["d"].cast(pa.int64()).to_pylist() == [micros]


@pytest.mark.parametrize(
    "after",
    [
        {"id": 1, "tags": {"a": 1.5}},  # polars alone would truncate to 1
        {"id": 2, "tags": {"a": 99999999999999999999}},  # ... or read null
        {"id": 3, "tags": [1, 2]},
        {"id": 4, "by_id": {"x": []}},  # key not an int
        {"id": 5, "took": "5 ms"},
        {"id": 6, "took": "PT0.0001S"},  # finer than the column's ms
        {"id": 7, "took": "P"},
    ],
)
def test_bad_map_and_duration_values_are_errors(after: dict) -> None:
    spec = LogSpec("t", MAPS, ["id"], 1)
    good = orjson.dumps({"after": {"id": 0, "tags": {"k": 1}}, "op": "c"})
    bad = json.dumps({"after": after, "op": "c"}).encode()  # json: orjson refuses > 64-bit ints
    recs = [RawRecord(0, 0, None, good), RawRecord(0, 1, None, bad)]
    d = decode_records(recs, spec, lenient=True)
    assert d.table["id"].to_pylist() == [0]
    assert [e.offset for e in d.errors] == [1] and d.errors[0].reason.startswith("wrong type")


@pytest.mark.parametrize("seed", [4, 5])
def test_random_round_trip_with_maps_and_durations(seed: int) -> None:
    spec = LogSpec("t", MAPS, ["id"], 1, changelog_mode="all")
    log = random_changelog(random.Random(seed), MAPS, n_keys=20, steps=80)
    assert_tables_equal(strip_meta(decode_records(as_records(spec, log), spec).table), log)


def test_a_schema_plan_is_never_applied_to_records_without_a_schema() -> None:
    """After a schema-include batch (base64 decimals, micros), plain records of the same
    table must not be read with those forms: "1230" is a decimal here, ints follow the
    column type."""
    schema = pa.schema(
        [("id", pa.int64()), ("qty", pa.decimal128(10, 0)), ("at", pa.timestamp("ms"))]
    )
    spec = LogSpec("dbz.t", schema, ["id"], 1)
    fields = [
        {"type": "int64", "field": "id"},
        {
            "type": "bytes",
            "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": "0"},
            "field": "qty",
        },
        {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "field": "at"},
    ]
    first = with_schema(
        {"after": {"id": 1, "qty": b64_decimal("1230", 0), "at": 5_000}, "op": "c"}, fields
    )
    plain = orjson.dumps({"after": {"id": 2, "qty": "1230", "at": 5_000}, "op": "c"})
    a = decode_records([RawRecord(0, 0, None, first)], spec).table
    b = decode_records([RawRecord(0, 1, None, plain)], spec).table
    c = decode_records([RawRecord(0, 2, None, first)], spec).table
    assert [(r["qty"], r["at"]) for t in (a, b, c) for r in t.to_pylist()] == [
        (decimal.Decimal(1230), dt.datetime(1970, 1, 1, 0, 0, 0, 5000)),  # 5000 us
        (decimal.Decimal(1230), dt.datetime(1970, 1, 1, 0, 0, 5)),  # 5000 ms (column unit)
        (decimal.Decimal(1230), dt.datetime(1970, 1, 1, 0, 0, 0, 5000)),
    ]


DECIMALS = pa.schema([("id", pa.int64()), ("amount", pa.decimal128(20, 2))])
DECIMAL_FIELDS = [
    {"type": "int64", "field": "id"},
    {
        "type": "bytes",
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": {"scale": "2", "connect.decimal.precision": "20"},
        "field": "amount",
    },
]
# negative, large (past int64 unscaled), one whose base64 is all digits ("9876" encodes
# -5368.38), zero
AMOUNTS = ["-5368.38", "123456789012345678.91", "0.00", "99.99", "-0.01"]


@pytest.mark.parametrize("order", ["as-is", "reversed"])
def test_precise_decimals_with_a_schema_whatever_else_the_table_holds(order: str) -> None:
    """A table without any date/time column: the records' schema is still consulted, and
    the record order does not matter."""
    spec = LogSpec("dbz.d", DECIMALS, ["id"], 1)
    docs = [
        with_schema({"after": {"id": i, "amount": b64_decimal(a, 2)}, "op": "c"}, DECIMAL_FIELDS)
        for i, a in enumerate(AMOUNTS)
    ]
    if order == "reversed":
        docs.reverse()
    out = decode_records([RawRecord(0, i, None, d) for i, d in enumerate(docs)], spec).table
    got = {r["id"]: r["amount"] for r in out.to_pylist()}
    assert got == {i: decimal.Decimal(a) for i, a in enumerate(AMOUNTS)}


def test_precise_decimals_without_a_schema_are_base64_at_the_declared_scale() -> None:
    """decimal.handling.mode=precise without a schema in the value (dts ingest's default):
    "9876" is base64 of -5368.38 here, never the number 9876."""
    spec = LogSpec("dbz.d", DECIMALS, ["id"], 1, decimal_mode="precise")
    assert b64_decimal("-5368.38", 2) == "9876"
    values = [
        orjson.dumps({"after": {"id": i, "amount": b64_decimal(a, 2)}, "op": "c"})
        for i, a in enumerate(AMOUNTS)
    ]
    out = decode_records([RawRecord(0, i, None, v) for i, v in enumerate(values)], spec).table
    got = {r["id"]: r["amount"] for r in out.to_pylist()}
    assert got == {i: decimal.Decimal(a) for i, a in enumerate(AMOUNTS)}


def test_string_and_double_decimal_modes_read_text_and_numbers() -> None:
    for mode in ("string", "double"):
        spec = LogSpec("dbz.d", DECIMALS, ["id"], 1, decimal_mode=mode)
        amount: object = "9876" if mode == "string" else 12.5
        value = orjson.dumps({"after": {"id": 1, "amount": amount}, "op": "c"})
        out = decode_records([RawRecord(0, 0, None, value)], spec).table
        assert out.column("amount").to_pylist() == [decimal.Decimal(str(amount))], mode


def test_a_precise_decimal_that_does_not_fit_is_an_error_with_its_reason() -> None:
    spec = LogSpec("dbz.d", pa.schema([("id", pa.int64()), ("amount", pa.decimal128(4, 2))]),
                   ["id"], 1, decimal_mode="precise")  # fmt: skip
    good = orjson.dumps({"after": {"id": 1, "amount": b64_decimal("12.34", 2)}, "op": "c"})
    wide = orjson.dumps({"after": {"id": 2, "amount": b64_decimal("123456.78", 2)}, "op": "c"})
    with pytest.raises(DecodeError):
        decode_records([RawRecord(0, 0, None, good), RawRecord(0, 1, None, wide)], spec)
    lenient = decode_records(
        [RawRecord(0, 0, None, good), RawRecord(0, 1, None, wide)], spec, lenient=True
    )
    assert lenient.table.column("amount").to_pylist() == [decimal.Decimal("12.34")]
    assert [e.offset for e in lenient.errors] == [1] and lenient.errors[0].reason


def test_a_decimal_mode_is_checked() -> None:
    with pytest.raises(Exception, match="decimal mode"):
        LogSpec("dbz.d", DECIMALS, ["id"], 1, decimal_mode="exact")


DECIMAL_ONLY = pa.schema([("id", pa.int64()), ("amount", pa.decimal128(38, 2))])
DECIMAL38_FIELDS = [
    {"type": "int64", "optional": False, "field": "id"},
    {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": "2", "connect.decimal.precision": "38"},
        "field": "amount",
    },
]
# Negative, zero, a value needing 1 byte, one wider than int64, and the decimal128 limit.
AMOUNTS38 = ["-5368.38", "0.00", "1.27", "-0.01", "123456789012345678901.23", "9" * 36 + ".99"]


@pytest.mark.parametrize("first_plain", [False, True])
def test_schema_decimal_is_exact_in_a_table_without_temporal_columns(first_plain: bool) -> None:
    """Regression (issue 24): with no date/time column the schema was never consulted, so
    every base64 decimal was refused ("'/0KJ' is not a valid decimal128 number"); and the
    outcome must not depend on what the table's previous batch looked like."""
    spec = LogSpec("dbz.d", DECIMAL_ONLY, ["id"], 1)
    if first_plain:  # a batch in our own form first: the table's plan is the default one
        ours = as_records(spec, pa.Table.from_pylist([{"id": 0, "amount": 1}], DECIMAL_ONLY))
        decode_records([RawRecord(0, 0, None, ours[0].value)], spec)
    recs = [
        RawRecord(
            0,
            i + 1,
            None,
            with_schema(
                {"before": None, "after": {"id": i, "amount": b64_decimal(a, 2)}, "op": "c"},
                fields=DECIMAL38_FIELDS,
            ),
        )
        for i, a in enumerate(AMOUNTS38)
    ]
    out = decode_records(recs, spec).table
    assert out["amount"].to_pylist() == [decimal.Decimal(a) for a in AMOUNTS38]


def test_truncates_heartbeats_and_schema_events_are_not_rows_nor_errors() -> None:
    """Debezium's op "t" is a Truncate at its place; heartbeats and schema-change events
    (no op) are skipped and counted; a record without op that is neither stays an error."""
    from logstore.codec import TRUNCATE_VALUE, decode_records

    spec = LogSpec("t", pa.schema([pa.field("id", pa.int64(), False)]), ["id"], 2)
    row = orjson.dumps({"before": None, "after": {"id": 1}, "op": "c"})
    schema_change = {
        "source": {"db": "shop"},
        "databaseName": "shop",
        "ddl": "ALTER TABLE t ADD c INT",
        "tableChanges": [],
    }
    records = [
        (0, 0, None, row, None),
        (0, 1, None, TRUNCATE_VALUE, None),
        (1, 7, None, orjson.dumps({"payload": {"op": "t", "source": {}}, "schema": {}}), None),
        (0, 2, None, orjson.dumps({"ts_ms": 1732460000000}), None),
        (0, 3, None, orjson.dumps({"schema": {}, "payload": schema_change}), None),
        (0, 4, None, orjson.dumps({"id": 1}), None),
    ]
    decoded = decode_records(records, spec, lenient=True)
    assert decoded.table["id"].to_pylist() == [1]
    assert [(t.partition, t.offset) for t in decoded.truncates] == [(0, 1), (1, 7)]
    assert decoded.skipped == 2
    assert [(e.offset, e.reason) for e in decoded.errors] == [(4, "unknown op None")]


def test_a_new_column_stops_decoding_at_the_first_record_that_carries_it() -> None:
    """Never dropped silently: with or without a schema, in the middle of a batch."""
    from logstore.codec import decode_records
    from logstore.errors import SourceSchemaChanged

    spec = LogSpec("t", pa.schema([pa.field("id", pa.int64(), False)]), ["id"], 1)

    def rec(i: int, after: dict) -> tuple:  # type: ignore[type-arg]
        return (0, i, None, orjson.dumps({"before": None, "after": after, "op": "c"}), None)

    records = [rec(i, {"id": i}) for i in range(50)]
    records += [rec(50, {"id": 50, "qty": None, "note": "x"}), rec(51, {"id": 51, "qty": 2.5})]
    records += [rec(i, {"id": i, "qty": 1.0, "note": "y"}) for i in range(52, 60)]
    with pytest.raises(SourceSchemaChanged) as err:
        decode_records(records, spec)
    assert (err.value.offset, err.value.index) == (50, 50)
    assert err.value.fields == {"qty": pa.float64(), "note": pa.string()}
    assert "never dropped silently" in str(err.value)
    # a decimal named by the record's schema keeps its precision and scale
    amount = {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": {"scale": "2", "connect.decimal.precision": "10"},
        "field": "amount",
    }
    image = {"type": "struct", "fields": [{"type": "int64", "field": "id"}, amount]}
    schema = {"type": "struct", "fields": [{**image, "field": "after"}]}
    payload = {"before": None, "after": {"id": 1, "amount": "AfE="}, "op": "c"}
    value = orjson.dumps({"schema": schema, "payload": payload})
    with pytest.raises(SourceSchemaChanged) as err:
        decode_records([(0, 0, None, value, None)], spec)
    assert err.value.fields == {"amount": pa.decimal128(10, 2)}


def test_decimals_as_json_numbers_are_read_exactly_or_refused() -> None:
    """Kafka's JsonConverter with ``decimal.format=NUMERIC`` writes decimals as JSON
    numbers, with or without a schema: read exactly into the column (never through a
    float), in the default ``precise`` mode too; a number the column cannot hold exactly
    is a bad record."""
    spec = LogSpec("dbz.t", SCHEMA, ["id"], 1, decimal_mode="precise")
    numeric = [{**f, "type": "double"} if f["field"] == "price" else f for f in FIELDS]

    def numbers(i: int, price: str, schema: bool) -> bytes:
        image = {**row(i), "price": decimal.Decimal(price)}
        if not schema:
            image = {**image, "seen_us": WHEN_US, "zoned": WHEN_US}
        payload = {"before": None, "after": image, "op": "c"}
        text = orjson.dumps(payload, default=str).replace(
            f'"{price}"'.encode(), price.encode()
        )  # the number as JsonConverter writes it: digits, not a string
        if schema:
            return orjson.dumps(
                {"schema": debezium_schema(numeric), "payload": orjson.loads(text)}
            ).replace(f"{float(price)!r}".encode(), price.encode())
        return text

    for schema in (True, False):
        recs = [
            RawRecord(0, i, None, numbers(i, p, schema))
            for i, p in enumerate(["12.34", "-0.01", "99999999.99", "0.10"])
        ]
        out = decode_records(recs, spec).table
        got = out.column("price").to_pylist()
        assert got == [decimal.Decimal(p) for p in ("12.34", "-0.01", "99999999.99", "0.10")], (
            schema
        )
        lossy = [RawRecord(0, 9, None, numbers(9, "1.005", schema))]
        with pytest.raises(DecodeError, match=r"1\.005 requires scale 3"):
            decode_records(lossy, spec)
