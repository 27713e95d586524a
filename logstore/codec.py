"""debezium-json -> Arrow, vectorized over batches, and the wire constants the
encoder (``logstore.encode``) shares.

Decoding joins the record values with newlines and parses them with
``pyarrow.json.read_json`` against an explicit envelope schema; only when a
batch fails to parse is it bisected to isolate the bad records.

JSON forms (Flink's JSON format where it has one): integers and floats as
numbers, decimals as strings (exact), strings as strings, binary as base64,
dates ``YYYY-MM-DD``, times ``HH:MM:SS[.f]``, timestamps without zone
``YYYY-MM-DD HH:MM:SS[.f]``, with zone ISO-8601 with offset, lists as arrays,
structs as objects. On read, decimals are also accepted as numbers,
timestamps with ``T`` or ``Z``, and a ``{"schema":…,"payload":…}`` envelope
(``debezium-json.schema-include``).

Row kinds: ``_row_kind`` holds Flink's short strings ``+I``, ``-U``, ``+U``,
``-D`` (what the decoder emits); the encoder also accepts int8 codes 0..3.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Literal, NamedTuple

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from logstore.debezium import (
    Plan,
    apply_form,
)
from logstore.envelope import (
    BATCH_ERRORS,
    EnvelopeSchemas,
    combined,
    envelope_schemas,
    image_table,
    images,
    parse_envelopes,
    parse_maps,
    read_json_values,
)
from logstore.errors import DecodeError
from logstore.markers import Headers, Marker, Truncate, parse_marker
from logstore.new_columns import check_new_columns, unknown_reason
from logstore.spec import OFFSET_COLUMN, PARTITION_COLUMN, ROW_KIND, LogSpec
from logstore.unavailable import unavailable_values
from logstore.wire import (
    from_wire,
)

ROW_KINDS = ("+I", "-U", "+U", "-D")
INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = 0, 1, 2, 3
OPS = ("c", "r", "u", "d", "t")
OP_C, OP_R, OP_U, OP_D, OP_T = 0, 1, 2, 3, 4
#: the value of a truncate record (Debezium's shape; see ``logstore.markers``)
TRUNCATE_VALUE = b'{"before":null,"after":null,"op":"t"}'

Bucketer = Callable[[pa.Table], Any]
UnknownColumns = Literal["raise", "dead-letter"]
#: the Kafka key of the j-th data record of a batch
_Keys = Callable[[int], bytes | None]


class RawRecord(NamedTuple):
    """A Kafka record as any client hands it over."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = None
    timestamp_ms: int | None = None


# --------------------------------------------------------------------------- decode


@dataclass(frozen=True)
class DecodeFailure:
    """A record that could not be decoded, with everything needed to dead-letter it."""

    partition: int
    offset: int
    reason: str
    key: bytes | None = None
    value: bytes | None = None
    headers: Headers = None


@dataclass
class Decoded:
    """Result of decoding a batch of raw records.

    ``table``: value columns + ``_row_kind`` + ``_partition`` + ``_offset`` in record order;
    ``markers``: barrier markers met; ``truncates``: truncate records met (rows of
    their partition before them are removed); ``errors``: bad records (lenient mode only).
    """

    table: pa.Table
    markers: list[Marker] = field(default_factory=list)
    errors: list[DecodeFailure] = field(default_factory=list)
    truncates: list[Truncate] = field(default_factory=list)
    skipped: int = 0  # records that are not change events (heartbeats, schema changes)
    # columns the table lacks that dead-lettered records carried (unknown_columns="dead-letter")
    unknown_columns: frozenset[str] = frozenset()


def output_schema(spec: LogSpec) -> pa.Schema:
    return pa.schema(
        [
            *spec.schema,
            pa.field(ROW_KIND, pa.string()),
            pa.field(PARTITION_COLUMN, pa.int32()),
            pa.field(OFFSET_COLUMN, pa.int64()),
        ]
    )


@dataclass
class _Part:
    """Decoded slice [lo, hi) of the data records; failures carry a reason instead."""

    lo: int
    hi: int
    op: np.ndarray | None = None  # int8 op codes; -1 = semantic error, -2 = not a change
    has_before: np.ndarray | None = None
    before: pa.Table | None = None
    after: pa.Table | None = None
    reasons: dict[int, str] = field(default_factory=dict)  # record index -> reason
    unknown: frozenset[str] = frozenset()  # columns the table lacks, carried by failed records


def _key_only_befores(
    before: pa.Table, keys: list[bytes | None], s: EnvelopeSchemas, plan: Plan
) -> pa.Table:
    """Before images of key-only deletes, key fields from the Kafka key (rest null)."""
    kt = read_json_values(pa.array(keys, pa.large_binary()), s.key(plan))
    payload = combined(kt.column("payload"))
    forms = dict(plan)
    cols = {}
    for f in s.spec.schema:
        if f.name not in kt.column_names:
            cols[f.name] = pa.nulls(len(keys), f.type)
            continue
        col = combined(kt.column(f.name))
        if payload.null_count < len(payload):  # schema-include key
            col = pc.if_else(payload.is_valid(), payload.field(f.name), col)
        form = forms.get(f.name)
        cols[f.name] = apply_form(col, f.type, form) if form else from_wire(col, f.type)
    return pa.Table.from_pydict(cols, schema=before.schema)


#: Debezium records that are not change events (no ``op``): heartbeats carry only a
#: timestamp (and the source's position), schema-change events a ``ddl``
OP_CONTROL = -2
_CONTROL_KEYS = frozenset({"ddl", "tableChanges", "databaseName", "schemaName"})
_HEARTBEAT_KEYS = frozenset({"ts_ms", "source"})


def _is_control_event(value: bytes | None) -> bool:
    try:
        doc = orjson.loads(value) if value else None
    except orjson.JSONDecodeError:
        return False
    if isinstance(doc, dict) and isinstance(doc.get("payload"), dict):
        doc = doc["payload"]
    if not isinstance(doc, dict) or "op" in doc:
        return False
    keys = set(doc)
    return bool(keys & _CONTROL_KEYS) or (bool(keys) and keys <= _HEARTBEAT_KEYS)


def _decode_slice(
    values: pa.Array, keys: _Keys, lo: int, hi: int, spec: LogSpec, exact: bool
) -> _Part:
    s = envelope_schemas(spec)
    vals = values.slice(lo, hi - lo)
    env, plan, unknown = parse_envelopes(vals, s, exact)
    before_w, after_w, op_text = images(env)
    maps = parse_maps(vals, s) if s.map_columns else (None, None)
    n = hi - lo
    op_idx = pc.index_in(op_text, value_set=pa.array(OPS))
    op = np.asarray(pc.fill_null(op_idx, -1).to_numpy(zero_copy_only=False), dtype=np.int8)
    has_before = np.asarray(before_w.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    has_after = np.asarray(after_w.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    before = image_table(before_w, maps[0], s, plan)
    after = image_table(after_w, maps[1], s, plan)

    # key-only deletes: a "d" without before takes its key fields from the Kafka key
    key_only = np.flatnonzero((op == OP_D) & ~has_before)
    if key_only.size:
        with_key = [int(i) for i in key_only if keys(lo + int(i))]
        if with_key:
            full = _key_only_befores(before, [keys(lo + i) for i in with_key], s, plan)
            idx = np.arange(n)
            idx[with_key] = n + np.arange(len(with_key))
            before = pa.concat_tables([before, full]).take(pa.array(idx))
            has_before = has_before.copy()
            has_before[with_key] = True

    reasons: dict[int, str] = {}
    bad = op < 0
    for i in np.flatnonzero(bad):
        if op_text[int(i)].as_py() is None and _is_control_event(vals[int(i)].as_py()):
            op[i] = OP_CONTROL  # a heartbeat or schema-change event: skipped, not an error
            continue
        reasons[int(i)] = f"unknown op {op_text[int(i)].as_py()!r}"
    bad = op == -1
    needs_after = (op == OP_C) | (op == OP_R) | (op == OP_U)
    for i in np.flatnonzero(needs_after & ~has_after & ~bad):
        reasons[int(i)] = f"op {OPS[op[i]]!r} without 'after'"
    if spec.effective_changelog_mode == "all":
        for i in np.flatnonzero((op == OP_U) & ~has_before):
            reasons.setdefault(int(i), "op 'u' without 'before' (log.changelog-mode=all needs it)")
    for i in np.flatnonzero((op == OP_D) & ~has_before):
        reasons.setdefault(int(i), "op 'd' without 'before' and without a key")
    if spec.primary_key:
        checks = [
            (needs_after & has_after, after, "after"),
            ((op == OP_D) & has_before, before, "before"),
        ]
        for mask, image, label in checks:
            for col in spec.primary_key:
                nulls = np.asarray(
                    image.column(col).is_null().to_numpy(zero_copy_only=False), dtype=bool
                )
                for i in np.flatnonzero(mask & nulls):
                    reasons.setdefault(int(i), f"key field {col!r} missing or null in {label!r}")
    for at, names in unknown.items():
        reasons.setdefault(at, unknown_reason(names))
    if spec.unavailable_values == "refuse":  # else the worker fills in the current values
        for image, present in ((after, has_after), (before, has_before)):
            for at, reason in unavailable_values(image, present).items():
                reasons.setdefault(at, reason)
    if reasons:
        op = op.copy()
        op[list(reasons)] = -1
    carried = frozenset(n for names in unknown.values() for n in names)
    return _Part(
        lo, hi, op, has_before, before, after, {lo + i: r for i, r in reasons.items()}, carried
    )


def _failure_reason(value: bytes, exc: Exception) -> str:
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as jexc:
        return f"invalid JSON: {jexc}"
    if not isinstance(doc, dict):
        return f"value is a JSON {type(doc).__name__}, not a debezium envelope object"
    return f"wrong type: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}"


def _decode_isolating(
    values: pa.Array, keys: _Keys, lo: int, hi: int, spec: LogSpec, exact: bool
) -> list[_Part]:
    """Decode [lo, hi) in one go; on failure bisect so only the bad records are lost."""
    try:
        return [_decode_slice(values, keys, lo, hi, spec, exact)]
    except BATCH_ERRORS as exc:
        if hi - lo == 1:
            return [_Part(lo, hi, reasons={lo: _failure_reason(values[lo].as_py(), exc)})]
    mid = (lo + hi) // 2
    return _decode_isolating(values, keys, lo, mid, spec, exact) + _decode_isolating(
        values, keys, mid, hi, spec, exact
    )


def _assemble(
    parts: list[_Part], spec: LogSpec, partitions: np.ndarray, offsets: np.ndarray
) -> pa.Table:
    """Turn decoded records into rows: c/r -> +I, u -> -U,+U, d -> -D."""
    good = [p for p in parts if p.op is not None]
    if not good:
        return output_schema(spec).empty_table()
    op = np.concatenate([p.op for p in good])
    has_before = np.concatenate([p.has_before for p in good])
    rec_ids = np.concatenate([np.arange(p.lo, p.hi) for p in good])
    before = pa.concat_tables([p.before for p in good])
    after = pa.concat_tables([p.after for p in good])
    n = len(op)
    two = (op == OP_U) & has_before
    counts = np.where((op < 0) | (op == OP_T), 0, np.where(two, 2, 1))
    rec = np.repeat(np.arange(n), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    pos = np.arange(len(rec)) - first
    rop = op[rec]
    use_before = (rop == OP_D) | (two[rec] & (pos == 0))
    kind = np.where(
        rop == OP_D,
        DELETE,
        np.where(rop == OP_U, np.where(use_before, UPDATE_BEFORE, UPDATE_AFTER), INSERT),
    )
    rows = pa.concat_tables([before, after]).take(pa.array(np.where(use_before, rec, rec + n)))
    rows = rows.cast(spec.schema)  # back to the table's nullability (key fields checked above)
    rid = rec_ids[rec]
    return (
        rows.append_column(
            pa.field(ROW_KIND, pa.string()), pc.take(pa.array(ROW_KINDS), pa.array(kind))
        )
        .append_column(
            pa.field(PARTITION_COLUMN, pa.int32()), pa.array(partitions[rid], pa.int32())
        )
        .append_column(pa.field(OFFSET_COLUMN, pa.int64()), pa.array(offsets[rid], pa.int64()))
    )


def decode_columns(
    spec: LogSpec,
    partitions: Sequence[int],
    offsets: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Headers],
    lenient: bool = False,
    topic: str | None = None,
    unknown_columns: UnknownColumns = "raise",
) -> Decoded:
    """Decode parallel record columns (the fast path used by LogReader).

    Python touches each record once (building one Arrow array of the values); only
    null values (markers, tombstones) and bad records are looked at one by one.

    ``unknown_columns``: a record carrying columns the table lacks raises
    ``SourceSchemaChanged`` (``"raise"``: a source's schema change, found from a sample
    of the batch, which an ingest may evolve the table for) or is a bad record like any
    other, every one of them found (``"dead-letter"``: the worker's rule for a table's
    own log, whose trusted writers evolve the table before writing such records).
    """
    topic = topic or spec.topic
    exact = unknown_columns == "dead-letter"
    if not exact:
        check_new_columns(values, partitions, offsets, spec.schema, topic)
    markers: list[Marker] = []
    errors: list[DecodeFailure] = []
    all_values = pa.array(values, pa.large_binary())
    if all_values.null_count:
        valid = np.asarray(all_values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        data_idx = np.flatnonzero(valid)
        data_values = all_values.filter(pa.array(valid))
        for i in np.flatnonzero(~valid).tolist():
            try:
                m = parse_marker(partitions[i], offsets[i], headers[i])
            except ValueError as exc:
                errors.append(
                    DecodeFailure(
                        partitions[i],
                        offsets[i],
                        f"bad dts.barrier header: {exc}",
                        keys[i],
                        None,
                        headers[i],
                    )
                )
                continue
            if m is not None:
                markers.append(m)
            # else: a Kafka tombstone, skipped as DESIGN.md says
    else:
        data_idx = np.arange(len(all_values))
        data_values = all_values
    part_arr = np.asarray(partitions, dtype=np.int64)[data_idx]
    off_arr = np.asarray(offsets, dtype=np.int64)[data_idx]

    def data_key(j: int) -> bytes | None:
        return keys[int(data_idx[j])]

    n = len(data_values)
    parts = _decode_isolating(data_values, data_key, 0, n, spec, exact) if n else []
    truncates = [
        Truncate(partitions[i], offsets[i])
        for p in parts
        if p.op is not None
        for i in data_idx[p.lo + np.flatnonzero(p.op == OP_T)].tolist()
    ]
    for p in parts:
        for j, reason in p.reasons.items():
            i = int(data_idx[j])
            errors.append(
                DecodeFailure(partitions[i], offsets[i], reason, keys[i], values[i], headers[i])
            )
    if errors and not lenient:
        first = min(errors, key=lambda e: (e.partition, e.offset))
        raise DecodeError(topic, first.partition, first.offset, first.reason)
    errors.sort(key=lambda e: (e.partition, e.offset))
    skipped = sum(int(np.count_nonzero(p.op == OP_CONTROL)) for p in parts if p.op is not None)
    table = _assemble(parts, spec, part_arr, off_arr)
    unknown = frozenset().union(*(p.unknown for p in parts))
    return Decoded(table, markers, errors, truncates, skipped, unknown)


def decode_records(
    records: Sequence[RawRecord | tuple[Any, ...]], spec: LogSpec, lenient: bool = False
) -> Decoded:
    """Decode raw records ``(partition, offset, key, value, headers[, timestamp_ms])``.

    Client-independent: the Faust worker passes what Faust gives it, the reader what
    confluent-kafka gives it. Non-lenient mode raises DecodeError on the first bad record.
    """
    if not records:
        return Decoded(output_schema(spec).empty_table())
    cols = [list(map(itemgetter(i), records)) for i in range(5)]
    return decode_columns(spec, cols[0], cols[1], cols[2], cols[3], cols[4], lenient)
