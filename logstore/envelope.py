"""Debezium JSON envelopes -> Arrow for one batch: the parse schemas per plan and the
vectorized parse (``pyarrow.json``; map columns through polars).

``logstore.codec`` decodes whole batches with these and bisects a batch only when its
parse raises one of ``BATCH_ERRORS``.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from logstore.debezium import (
    DEFAULT_PLAN,
    SCHEMA_PARSE_TYPE,
    Plan,
    apply_form,
    batch_semantics,
    json_number_fields,
    parse_type,
    plan_from_semantics,
    probe_plan,
    schemaless_plan,
)
from logstore.new_columns import Unknown, strip_inferred, unknown_per_record
from logstore.spec import LogSpec
from logstore.wire import (
    arrow_parse_type,
    from_wire,
    has_map,
    polars_parse_type,
)


def _first_values(values: pa.Array, limit: int = 32) -> list[bytes]:
    return [v for v in values.slice(0, limit).to_pylist() if v is not None]


class EnvelopeSchemas:
    """Per-spec parse schemas (one per plan, built on first use) and the last plan that worked."""

    def __init__(self, spec: LogSpec) -> None:
        self.spec = spec
        self.map_columns = [f.name for f in spec.schema if has_map(f.type)]
        self.arrow_fields = [f for f in spec.schema if not has_map(f.type)]
        # before/after images: absent images are null rows, so every field is nullable here
        self.images = pa.schema([f.with_nullable(True) for f in spec.schema])
        # the forms the last batch used (tried first); a log starts with its decimal mode's
        self.plan: Plan = DEFAULT_PLAN + schemaless_plan(spec.schema, spec.decimal_mode)
        self.plan_from_schema = False
        self._envelopes: dict[tuple[Plan, bool], pa.Schema] = {}
        self._keys: dict[Plan, pa.Schema] = {}
        self.polars_envelope: pl.Struct | None = None
        if self.map_columns:
            row = pl.Struct(
                {c: polars_parse_type(spec.schema.field(c).type) for c in self.map_columns}
            )
            images = {"before": row, "after": row}
            self.polars_envelope = pl.Struct({**images, "payload": pl.Struct(images)})

    def _row(self, fields: list[pa.Field], plan: Plan) -> pa.StructType:
        forms = dict(plan)
        return pa.struct(
            [
                pa.field(f.name, parse_type(f.type, forms[f.name]))
                if f.name in forms
                else pa.field(f.name, arrow_parse_type(f.type))
                for f in fields
            ]
        )

    def envelope(self, plan: Plan, include: bool = False) -> pa.Schema:
        """The parse schema; ``include`` adds schema-include's ``payload`` and ``schema``.

        Declaring those costs the Arrow reader ~40% even when absent, so batches
        are parsed without them first and again with them only when some record
        lacks a top-level ``op``.
        """
        s = self._envelopes.get((plan, include))
        if s is None:
            row = self._row(self.arrow_fields, plan)
            env = [pa.field("before", row), pa.field("after", row), pa.field("op", pa.string())]
            extra = [pa.field("payload", pa.struct(env)), pa.field("schema", SCHEMA_PARSE_TYPE)]
            s = self._envelopes[(plan, include)] = pa.schema(env + extra if include else env)
        return s

    def key(self, plan: Plan) -> pa.Schema:
        s = self._keys.get(plan)
        if s is None:
            fields = [
                self.spec.schema.field(c)
                for c in self.spec.key_columns
                if c not in self.map_columns
            ]
            row = self._row(fields, plan)
            s = self._keys[plan] = pa.schema([*row, pa.field("payload", row)])
        return s


_SCHEMAS: dict[int, EnvelopeSchemas] = {}


def envelope_schemas(spec: LogSpec) -> EnvelopeSchemas:
    # keyed by id(spec) with the spec kept alive in the value, so never stale
    s = _SCHEMAS.get(id(spec))
    if s is None or s.spec is not spec:
        if len(_SCHEMAS) > 256:
            _SCHEMAS.clear()
        s = _SCHEMAS[id(spec)] = EnvelopeSchemas(spec)
    return s


#: what a failing parse or conversion raises; a batch that raises one is bisected
BATCH_ERRORS = (pa.ArrowException, ValueError, pl.exceptions.PolarsError)
_NL = pa.scalar(b"\n", pa.large_binary())
_EMPTY = pa.scalar(b"", pa.large_binary())


def read_json_values(values: pa.Array, schema: pa.Schema, infer: bool = False) -> pa.Table:
    """Parse one JSON object per value (large_binary array) with pyarrow, in one pass.

    ``infer``: fields ``schema`` does not name are kept with inferred types (for
    ``strip_inferred``) instead of skipped."""
    n = len(values)
    joined = pc.binary_join_element_wise(values, _NL, _EMPTY)  # each value + "\n"
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int64)[
        joined.offset : joined.offset + n + 1
    ]
    data = joined.buffers()[2]
    lo, hi = int(offsets[0]), int(offsets[-1])
    buf = data.slice(lo, hi - lo) if data is not None else pa.py_buffer(b"")
    # raw newlines can only be whitespace between tokens; tell the reader when there are any
    multiline = int(np.count_nonzero(np.frombuffer(buf, dtype=np.uint8) == 10)) != n
    longest = int(np.diff(offsets).max()) if n else 0
    table = pj.read_json(
        pa.BufferReader(buf),
        read_options=pj.ReadOptions(block_size=max(1 << 20, 2 * longest + 64)),
        parse_options=pj.ParseOptions(
            explicit_schema=schema,
            unexpected_field_behavior="infer" if infer else "ignore",
            newlines_in_values=multiline,
        ),
    )
    if table.num_rows != n:
        raise ValueError(f"expected {n} JSON objects, found {table.num_rows}")
    return table


def combined(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks else pa.array([], col.type)
    return col


def images(env: pa.Table) -> tuple[pa.Array, pa.Array, pa.Array]:
    """before, after, op of each record, from the top level or a schema-include payload."""
    payload = combined(env.column("payload")) if "payload" in env.column_names else None
    out = []
    for name in ("before", "after", "op"):
        top = combined(env.column(name))
        if payload is not None and payload.null_count < len(payload):
            top = pc.if_else(payload.is_valid(), payload.field(name), top)
        out.append(top)
    return out[0], out[1], out[2]


def parse_maps(values: pa.Array, s: EnvelopeSchemas) -> tuple[pa.Array, pa.Array]:
    """Map columns of before/after, parsed by polars (pyarrow cannot read maps)."""
    text = pl.from_arrow(values.cast(pa.large_string()))  # also checks UTF-8
    assert isinstance(text, pl.Series) and s.polars_envelope is not None
    env = text.str.json_decode(s.polars_envelope).to_arrow()
    payload = env.field("payload")
    images = []
    for name in ("before", "after"):
        top = env.field(name)
        if payload.null_count < len(payload):
            top = pc.if_else(payload.is_valid(), payload.field(name), top)
        images.append(top)
    return images[0], images[1]


def image_table(
    arrow_part: pa.Array, map_part: pa.Array | None, s: EnvelopeSchemas, plan: Plan
) -> pa.Table:
    """One image (struct per record, wire forms) -> a table of the columns in their types.

    ``flatten`` keeps the struct's nulls, so an absent image is a row of nulls.
    """
    forms = dict(plan)
    cols = dict(zip([f.name for f in s.arrow_fields], arrow_part.flatten(), strict=True))
    if map_part is not None:
        cols.update(zip(s.map_columns, map_part.flatten(), strict=True))
    arrays = []
    for f in s.spec.schema:
        form = forms.get(f.name)
        col = cols[f.name]
        arrays.append(apply_form(col, f.type, form) if form else from_wire(col, f.type))
    return pa.Table.from_arrays(arrays, schema=s.images)


def _parse_with(
    values: pa.Array, s: EnvelopeSchemas, plan: Plan, include: bool, exact: bool
) -> tuple[pa.Table, Unknown]:
    env, unknown = _parse_schema(values, s.envelope(plan, include), s, exact)
    if not include and env.column("op").null_count:  # schema-include records (or no op)
        env, unknown = _parse_schema(values, s.envelope(plan, include=True), s, exact)
    return env, unknown


def _parse_schema(
    values: pa.Array, schema: pa.Schema, s: EnvelopeSchemas, exact: bool
) -> tuple[pa.Table, Unknown]:
    """Parse against ``schema``; ``exact`` also finds every record carrying a column the
    table lacks (an inferring parse: ~0.4 us a record with a Debezium ``source`` block)."""
    if not exact:
        return read_json_values(values, schema), {}
    try:
        return strip_inferred(read_json_values(values, schema, infer=True), schema)
    except BATCH_ERRORS:
        # extra fields whose types disagree between records: parse as usual and look at
        # the records one by one; a record the usual parse refuses is bisected as ever
        env = read_json_values(values, schema)
        return env, unknown_per_record(values.to_pylist(), set(s.spec.schema.names))


def parse_envelopes(
    values: pa.Array, s: EnvelopeSchemas, exact: bool = False
) -> tuple[pa.Table, Plan, Unknown]:
    """Parse a batch with the table's current plan, switching plan when the batch says so.

    A plan taken from a Debezium schema (units, base64 decimals) is applied only to
    records that carry that schema: ``"1230"`` is a decimal in our form and base64
    in Debezium's, so guessing would misread silently. ``exact``: also the records that
    carry columns the table lacks (record index -> names).
    """
    plan, from_schema = s.plan, s.plan_from_schema
    try:
        env, unknown = _parse_with(values, s, plan, from_schema, exact)
    except BATCH_ERRORS:
        probed = probe_plan(_first_values(values), s.spec.schema, s.spec.decimal_mode)
        if probed == (plan, from_schema):
            raise
        plan, from_schema = probed
        env, unknown = _parse_with(values, s, plan, from_schema, exact)
    has_schema = "schema" in env.column_names
    semantics = batch_semantics(combined(env.column("schema"))) if has_schema else None
    if semantics is not None:
        numbers = json_number_fields(_first_values(values), s.spec.schema)
        wanted, from_schema = plan_from_semantics(s.spec.schema, semantics, numbers), True
        if wanted != plan:
            plan = wanted
            env, unknown = _parse_with(values, s, plan, True, exact)
    elif from_schema:  # the batch has no schema: the column-type rule applies, not the old one
        plan, from_schema = probe_plan(_first_values(values), s.spec.schema, s.spec.decimal_mode)
        env, unknown = _parse_with(values, s, plan, False, exact)
    s.plan, s.plan_from_schema = plan, from_schema
    return env, plan, unknown
