"""Changes of a FileStore table between two snapshots, as rows with `_row_kind`.

`start <= 0` means "from an empty table": the end snapshot's rows, all `+I`
(the first micro-batch of `scan.mode=latest-full`). Otherwise the FileStore's
own `Table.changes(start, end)` answers, which is correct across compactions.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from bridge.spark.options import ROW_KIND


def snapshot_changes(
    table: Any, start: int, end: int, columns: list[str] | None = None
) -> pa.Table:
    """Rows changed after snapshot `start` (exclusive, 0 = empty) up to `end` (inclusive)."""
    if start <= 0:
        rows = table.read(snapshot_id=end, columns=columns)
        out = rows.append_column(ROW_KIND, pa.array(["+I"] * rows.num_rows, pa.string()))
    else:
        out = table.changes(start, end)
    keep = [*(columns or [n for n in out.schema.names if n != ROW_KIND]), ROW_KIND]
    return out.select([c for c in keep if c in out.schema.names])
