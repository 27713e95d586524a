"""Debezium's placeholder for a TOASTed value PostgreSQL did not send (no broker): the
record is refused with the way out, never stored with the placeholder as its value."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pytest

from logstore.codec import RawRecord, decode_records
from logstore.errors import DecodeError
from logstore.spec import LogSpec
from logstore.unavailable import PLACEHOLDER

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("note", pa.string()),
        ("tags", pa.list_(pa.string())),
        ("n", pa.int64()),
    ]
)
SPEC = LogSpec("src", SCHEMA, ["id"], 1, changelog_mode="upsert")


def _update(i: int, after: dict[str, object]) -> RawRecord:
    value = orjson.dumps({"before": None, "after": {"id": i, **after}, "op": "u"})
    return RawRecord(0, i, orjson.dumps({"id": i}), value, None)


def test_a_placeholder_in_any_column_is_a_bad_record_naming_the_way_out() -> None:
    records = [
        _update(0, {"note": "whole", "tags": ["a"], "n": 1}),
        _update(1, {"note": PLACEHOLDER, "tags": ["a"], "n": 2}),
        _update(2, {"note": "x", "tags": [PLACEHOLDER], "n": 3}),
        _update(3, {"note": f"{PLACEHOLDER} inside a text is a value", "tags": None, "n": 4}),
    ]
    decoded = decode_records(records, SPEC, lenient=True)
    assert [e.offset for e in decoded.errors] == [1, 2]
    assert "'note'" in decoded.errors[0].reason and "'tags'" in decoded.errors[1].reason
    assert all("REPLICA IDENTITY FULL" in e.reason for e in decoded.errors)
    assert decoded.table.column("id").to_pylist() == [0, 3]  # nothing stored with it
    with pytest.raises(DecodeError, match="TOASTed column"):
        decode_records(records, SPEC)
