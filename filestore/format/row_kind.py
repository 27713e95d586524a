"""Row kinds: the ``_row_kind`` strings users write and the int8 ``_VALUE_KIND`` in files."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filestore.errors import SchemaError

INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = 0, 1, 2, 3  # as Paimon's RowKind
SHORT_STRINGS = ("+I", "-U", "+U", "-D")
ROW_KIND_COLUMN = "_row_kind"
VALUE_KIND = "_VALUE_KIND"
SEQUENCE_NUMBER = "_SEQUENCE_NUMBER"
_VALUE_SET = pa.array(SHORT_STRINGS)


def parse_row_kinds(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """'+I'/'-U'/'+U'/'-D' strings (or int8 codes 0..3) to int8 codes; SchemaError otherwise."""
    if pa.types.is_integer(column.type):
        codes = pc.cast(column, pa.int8(), safe=False)
        bad = pc.or_kleene(pc.is_null(codes), pc.or_(pc.less(codes, 0), pc.greater(codes, 3)))
    else:
        codes = pc.cast(pc.index_in(pc.cast(column, pa.string()), value_set=_VALUE_SET), pa.int8())
        bad = pc.is_null(codes)
    if pc.any(bad).as_py():
        first = int(np.flatnonzero(np.asarray(bad.to_numpy(zero_copy_only=False)))[0])
        raise SchemaError(
            f"column {ROW_KIND_COLUMN!r}: unknown row kind {column[first].as_py()!r} at row {first}; "
            f"expected one of {', '.join(SHORT_STRINGS)}"
        )
    if isinstance(codes, pa.ChunkedArray):
        codes = codes.combine_chunks()
    return codes


def kinds_to_strings(codes: pa.Array | pa.ChunkedArray) -> pa.Array:
    return pc.take(_VALUE_SET, pc.cast(codes, pa.int32()))
