"""Fast unit tests of the debezium-json codec (no broker)."""

from __future__ import annotations

import random

import numpy as np
import orjson
import pyarrow as pa
import pytest

from logstore.codec import RawRecord, decode_records
from logstore.encode import encode_batch
from logstore.errors import DecodeError, EncodeError, LogSpecError
from logstore.markers import marker_headers
from logstore.spec import LogSpec, topic_settings
from tests.logstore.support import (
    ALL_TYPES,
    as_records,
    assert_tables_equal,
    random_changelog,
    random_rows,
    strip_meta,
)

PK_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("d", pa.date32())])


def spec_all(**kw) -> LogSpec:  # type: ignore[no-untyped-def]
    return LogSpec("dts.db.t", ALL_TYPES, ["id"], 3, changelog_mode="all", **kw)


def value_of(rec: RawRecord) -> dict:
    assert rec.value is not None
    return orjson.loads(rec.value)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_round_trip_every_type_all_mode(seed: int) -> None:
    spec = spec_all()
    log = random_changelog(random.Random(seed), ALL_TYPES, n_keys=40, steps=200)
    decoded = decode_records(as_records(spec, log), spec)
    assert decoded.errors == [] and decoded.markers == []
    assert_tables_equal(strip_meta(decoded.table), log)


def test_update_pairs_become_real_u_records() -> None:
    spec = spec_all()
    rows = random_rows(random.Random(5), ALL_TYPES, [7, 7])
    log = rows.append_column("_row_kind", pa.array(["-U", "+U"]))
    recs = as_records(spec, log)
    assert len(recs) == 1
    v = value_of(recs[0])
    assert v["op"] == "u" and v["before"]["id"] == 7 and v["after"]["id"] == 7
    assert orjson.loads(recs[0].key) == {"id": 7}  # type: ignore[arg-type]


def test_lone_update_kinds_are_written_as_flink_does() -> None:
    spec = LogSpec("t", PK_SCHEMA, ["id"], 1, changelog_mode="all")
    log = pa.table({"id": [1, 2], "name": ["a", "b"], "d": pa.array([None, None], pa.date32())})
    log = log.append_column("_row_kind", pa.array(["+U", "-U"]))
    ops = [value_of(r)["op"] for r in as_records(spec, log)]
    assert ops == ["c", "d"]
    assert decode_records(as_records(spec, log), spec).table["_row_kind"].to_pylist() == [
        "+I",
        "-D",
    ]


def test_upsert_mode_drops_update_before() -> None:
    spec = LogSpec("t", PK_SCHEMA, ["id"], 2)  # auto -> upsert with a primary key
    assert spec.effective_changelog_mode == "upsert"
    log = pa.table(
        {"id": [1, 1, 1, 1], "name": ["a", "a", "b", "b"], "d": pa.array([None] * 4, pa.date32())}
    )
    log = log.append_column("_row_kind", pa.array(["+I", "-U", "+U", "-D"]))
    recs = as_records(spec, log)
    assert [value_of(r)["op"] for r in recs] == ["c", "c", "d"]
    out = decode_records(recs, spec).table
    assert out["_row_kind"].to_pylist() == ["+I", "+I", "-D"]
    assert out["name"].to_pylist() == ["a", "b", "b"]


def test_int8_row_kinds_accepted() -> None:
    spec = LogSpec("t", PK_SCHEMA, ["id"], 1, changelog_mode="all")
    log = pa.table({"id": [1], "name": ["a"], "d": pa.array([None], pa.date32())})
    log = log.append_column("_row_kind", pa.array([3], pa.int8()))
    assert [value_of(r)["op"] for r in as_records(spec, log)] == ["d"]


def test_keyless_table_uses_whole_row_as_key() -> None:
    spec = LogSpec("t", PK_SCHEMA, [], 2)
    assert spec.effective_changelog_mode == "all"
    log = pa.table({"id": [1], "name": ["x"], "d": pa.array([0], pa.date32())})
    rec = as_records(spec, log)[0]
    assert orjson.loads(rec.key) == {"id": 1, "name": "x", "d": "1970-01-01"}  # type: ignore[arg-type]


def test_encode_refuses_bad_input() -> None:
    spec = LogSpec("t", pa.schema([("id", pa.int64()), ("x", pa.float64())]), ["id"], 1)
    bucketer = lambda t: np.zeros(t.num_rows, np.int32)  # noqa: E731
    with pytest.raises(EncodeError, match="NaN"):
        encode_batch(pa.table({"id": [1], "x": [float("nan")]}), spec, bucketer)
    with pytest.raises(EncodeError, match="lack columns"):
        encode_batch(pa.table({"id": [1]}), spec, bucketer)
    with pytest.raises(EncodeError, match="_row_kind"):
        encode_batch(pa.table({"id": [1], "x": [1.0], "_row_kind": ["+X"]}), spec, bucketer)
    with pytest.raises(EncodeError, match="bucket"):
        encode_batch(pa.table({"id": [1], "x": [1.0]}), spec, lambda t: np.array([5]))


def test_spec_validation() -> None:
    with pytest.raises(LogSpecError, match="eventual"):
        LogSpec("t", PK_SCHEMA, [], 1, consistency="eventual")
    with pytest.raises(LogSpecError, match="reserved"):
        LogSpec("t", pa.schema([("_offset", pa.int64())]), [], 1)
    with pytest.raises(LogSpecError, match="primary key"):
        LogSpec("t", PK_SCHEMA, ["nope"], 1)
    with pytest.raises(LogSpecError, match="replication-factor"):
        LogSpec("t", PK_SCHEMA, ["id"], 1, replication_factor=0)
    with pytest.raises(LogSpecError, match="min-insync-replicas"):
        LogSpec("t", PK_SCHEMA, ["id"], 1, replication_factor=2, min_insync_replicas=3)


def test_topic_settings_from_table_options() -> None:
    assert topic_settings({}) == {"replication_factor": None, "min_insync_replicas": None}
    got = topic_settings({"log.replication-factor": "3", "log.min-insync-replicas": " 2 "})
    assert got == {"replication_factor": 3, "min_insync_replicas": 2}
    assert LogSpec("t", PK_SCHEMA, ["id"], 1, **got).replication_factor == 3
    with pytest.raises(LogSpecError, match=r"log\.replication-factor must be an integer"):
        topic_settings({"log.replication-factor": "three"})


def test_schema_include_envelope_and_other_spellings() -> None:
    spec = LogSpec(
        "t",
        pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us")), ("dec", pa.decimal128(6, 2))]),
        ["id"],
        1,
    )
    payload = {
        "before": None,
        "after": {"id": 1, "ts": "2020-01-02T03:04:05Z", "dec": 12.5},
        "op": "r",
    }
    value = orjson.dumps({"schema": {"type": "struct", "fields": []}, "payload": payload})
    out = decode_records([RawRecord(0, 0, None, value)], spec).table
    assert out.to_pylist()[0]["id"] == 1 and out["_row_kind"].to_pylist() == ["+I"]
    assert str(out["dec"][0].as_py()) == "12.50"


def test_key_only_delete_takes_key_from_kafka_key() -> None:
    spec = LogSpec("t", PK_SCHEMA, ["id"], 1)
    value = orjson.dumps({"before": None, "after": None, "op": "d"})
    out = decode_records([RawRecord(0, 3, b'{"id": 42}', value)], spec).table
    assert out.to_pylist() == [
        {"id": 42, "name": None, "d": None, "_row_kind": "-D", "_partition": 0, "_offset": 3}
    ]


def test_markers_and_tombstones() -> None:
    spec = LogSpec("t", PK_SCHEMA, ["id"], 2)
    good = as_records(
        spec, pa.table({"id": [1], "name": ["a"], "d": pa.array([None], pa.date32())})
    )[0]
    recs = [
        good,
        RawRecord(1, 5, None, None, marker_headers(1700000000000)),
        RawRecord(0, 6, b'{"id":1}', None, None),  # tombstone: skipped
    ]
    d = decode_records(recs, spec)
    assert d.table.num_rows == 1
    assert [(m.partition, m.offset, m.barrier) for m in d.markers] == [(1, 5, 1700000000000)]


BAD_CASES = {
    "invalid JSON": b'{"before": null, "after": {"id": 1,',
    "unknown op": b'{"before": null, "after": {"id": 1, "name": "x"}, "op": "z"}',
    "op 'u' without 'before'": b'{"after": {"id": 1, "name": "x"}, "op": "u"}',
    "key field 'id' missing": b'{"before": null, "after": {"name": "x"}, "op": "c"}',
    "wrong type": b'{"before": null, "after": {"id": "one", "name": "x"}, "op": "c"}',
    "without 'after'": b'{"before": null, "after": null, "op": "c"}',
    "not a debezium envelope": b"[1, 2]",
    "conversion from `str` to `date` failed in column": b'{"after": {"id": 1, "d": "2020-13-45"}, "op": "c"}',
}


def test_each_malformed_case_has_its_reason() -> None:
    spec = LogSpec("t", PK_SCHEMA, ["id"], 1, changelog_mode="all")
    good = orjson.dumps(
        {"before": None, "after": {"id": 9, "name": "ok", "d": "2021-01-01"}, "op": "c"}
    )
    recs = [RawRecord(0, 0, None, good)]
    for i, bad in enumerate(BAD_CASES.values(), start=1):
        recs += [RawRecord(0, 2 * i - 1, None, bad), RawRecord(0, 2 * i, None, good)]
    d = decode_records(recs, spec, lenient=True)
    assert d.table.num_rows == 1 + len(BAD_CASES)  # every good record survives the bisection
    assert len(d.errors) == len(BAD_CASES)
    for err, expected in zip(d.errors, BAD_CASES, strict=True):
        assert expected in err.reason, (expected, err.reason)
        assert err.value is not None and err.offset % 2 == 1


def test_strict_mode_raises_with_location() -> None:
    spec = LogSpec("dts.db.strict", PK_SCHEMA, ["id"], 1)
    with pytest.raises(DecodeError) as info:
        decode_records([RawRecord(0, 17, None, b"nope")], spec)
    assert (
        info.value.partition == 0
        and info.value.offset == 17
        and info.value.topic == "dts.db.strict"
    )
    assert "invalid JSON" in info.value.reason


def test_values_with_raw_newlines_parse() -> None:
    spec = LogSpec("t", PK_SCHEMA, ["id"], 1)
    pretty = orjson.dumps(
        {"before": None, "after": {"id": 1, "name": "x"}, "op": "c"}, option=orjson.OPT_INDENT_2
    )
    assert b"\n" in pretty
    out = decode_records([RawRecord(0, 0, None, pretty), RawRecord(0, 1, None, pretty)], spec).table
    assert out["id"].to_pylist() == [1, 1]


def _unknown_field_batch() -> list[bytes]:
    """Twenty creates; three in the middle carry columns the table lacks, with values of
    different types (so the inferring parse of the whole batch fails and is redone)."""
    values = [
        orjson.dumps({"before": None, "after": {"id": i, "v": "a"}, "op": "c", "source": {}})
        for i in range(20)
    ]
    values[7] = orjson.dumps(
        {"before": None, "after": {"id": 7, "v": "a", "zzz": [1, 2]}, "op": "c"}
    )
    values[11] = orjson.dumps(
        {"before": None, "after": {"id": 11, "v": "a", "zzz": "x"}, "op": "c"}
    )
    values[12] = orjson.dumps(
        {"schema": {"type": "struct"}, "payload": {"after": {"id": 12, "yy": 1}, "op": "c"}}
    )
    values[13] = orjson.dumps({"before": None, "after": {"id": 13, "zzz": None}, "op": "c"})
    return values


@pytest.mark.parametrize("conflict", [True, False], ids=["types-disagree", "types-agree"])
def test_dead_letter_mode_finds_every_record_carrying_an_unknown_column(conflict: bool) -> None:
    from logstore.codec import decode_columns

    spec = LogSpec("t", pa.schema([("id", pa.int64()), ("v", pa.string())]))
    values = _unknown_field_batch()
    if not conflict:
        values[11] = values[11].replace(b'"x"', b"[3]")
    n = len(values)
    args = (spec, [0] * n, list(range(n)), [None] * n, values, [None] * n)
    got = decode_columns(*args, lenient=True, unknown_columns="dead-letter")
    assert {e.offset: e.reason.split(".")[0] for e in got.errors} == {
        7: "it carries columns the table does not have: zzz",
        11: "it carries columns the table does not have: zzz",
        12: "it carries columns the table does not have: yy",
    }
    assert got.unknown_columns == {"zzz", "yy"}
    # a null in a column the table lacks carries nothing: record 13 is taken
    assert sorted(got.table.column("id").to_pylist()) == [
        i for i in range(20) if i not in (7, 11, 12)
    ]
