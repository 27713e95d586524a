"""log.unavailable-values=keep-current: Debezium's placeholder for a value the source did
not send (PostgreSQL's unchanged TOASTed column) is filled in with the key's current value
by the Normalizer, from earlier rows of the batch or its state; never stored."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from logstore.errors import LogSpecError
from logstore.normalize import Normalizer
from logstore.spec import LogSpec
from logstore.unavailable import PLACEHOLDER

P = PLACEHOLDER
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("n", pa.int32()),
        ("doc", pa.string()),
        ("blob", pa.binary()),
        ("tags", pa.list_(pa.string())),
    ]
)
SPEC = LogSpec("t", SCHEMA, ["id"], 1, unavailable_values="keep-current")


def rows(*given: tuple[object, ...], kinds: list[str] | None = None) -> pa.Table:
    cols = list(zip(*given, strict=True))
    table = pa.Table.from_arrays(
        [pa.array(list(c), f.type) for c, f in zip(cols, SCHEMA, strict=True)], schema=SCHEMA
    )
    kind = kinds or ["+I"] * len(given)
    offsets = list(range(100, 100 + len(given)))
    return table.append_column("_row_kind", pa.array(kind)).append_column(
        "_offset", pa.array(offsets, pa.int64())
    )


def after_images(out: pa.Table) -> list[dict[str, object]]:
    kept = out.filter(pa.compute.not_equal(out["_row_kind"], "-U"))
    return kept.drop_columns(["_offset"]).to_pylist()


def test_placeholders_take_the_value_from_state_and_earlier_rows_of_the_batch() -> None:
    norm = Normalizer(SPEC)
    norm.seed(rows((1, 0, "big", b"\x00\x01", ["a", "b"])).drop_columns(["_row_kind", "_offset"]))
    out = norm.process(
        rows(
            (1, 1, P, P.encode(), [P]),  # every TOASTed column unchanged: from state
            (2, 5, "two", b"2", ["x"]),  # a new key, whole
            (2, 6, P, b"22", [P]),  # unchanged twice in one batch: from the row above
            (2, 7, P, P.encode(), ["y"]),
            (1, 2, "new", P.encode(), [P]),  # a changed value, the others still kept
        )
    )
    assert norm.unresolved is None
    assert after_images(out) == [
        {"id": 1, "n": 1, "doc": "big", "blob": b"\x00\x01", "tags": ["a", "b"], "_row_kind": "+U"},
        {"id": 2, "n": 5, "doc": "two", "blob": b"2", "tags": ["x"], "_row_kind": "+I"},
        {"id": 2, "n": 6, "doc": "two", "blob": b"22", "tags": ["x"], "_row_kind": "+U"},
        {"id": 2, "n": 7, "doc": "two", "blob": b"22", "tags": ["y"], "_row_kind": "+U"},
        {"id": 1, "n": 2, "doc": "new", "blob": b"\x00\x01", "tags": ["a", "b"], "_row_kind": "+U"},
    ]
    # the state holds the filled rows: the next batch's placeholders find them
    out = norm.process(rows((2, 8, P, P.encode(), [P])))
    assert after_images(out) == [
        {"id": 2, "n": 8, "doc": "two", "blob": b"22", "tags": ["y"], "_row_kind": "+U"}
    ]


def test_a_placeholder_with_no_current_value_is_set_apart_never_stored() -> None:
    norm = Normalizer(SPEC)
    out = norm.process(
        rows(
            (3, 1, P, b"x", ["t"]),  # a key never seen whole (no initial snapshot)
            (4, 1, "four", b"4", ["f"]),
            (4, None, None, None, None),  # deleted ...
            (4, 2, P, b"4", ["f"]),  # ... then an update that keeps a value: none left
            (3, 2, "three", b"x", ["t"]),  # whole again: taken
            kinds=["+I", "+I", "-D", "+I", "+I"],
        )
    )
    assert norm.unresolved is not None
    assert norm.unresolved.column("_offset").to_pylist() == [100, 103]
    assert P not in str(out.to_pylist())
    assert after_images(out) == [
        {"id": 4, "n": 1, "doc": "four", "blob": b"4", "tags": ["f"], "_row_kind": "+I"},
        {"id": 4, "n": 1, "doc": "four", "blob": b"4", "tags": ["f"], "_row_kind": "-D"},
        {"id": 3, "n": 2, "doc": "three", "blob": b"x", "tags": ["t"], "_row_kind": "+I"},
    ]
    norm.process(rows((4, 3, "back", b"", [])))
    assert norm.unresolved is None  # reset each batch


def test_a_table_without_the_option_does_not_fill() -> None:
    norm = Normalizer(dataclasses.replace(SPEC, unavailable_values="refuse"))
    out = norm.process(rows((1, 1, P, b"x", ["t"])))
    assert out.column("doc").to_pylist() == [P] and norm.unresolved is None


def test_the_spec_refuses_other_words() -> None:
    with pytest.raises(LogSpecError, match="keep-current"):
        dataclasses.replace(SPEC, unavailable_values="keep")
