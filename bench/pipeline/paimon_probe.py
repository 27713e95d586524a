"""The Paimon variant's reader, in a process of its own: pypaimon-rust (Apache Paimon's Rust
core, see ``readers_apart``) reads the Paimon tables as a Python user beside the Spark job
would, at no cost to the job's JVM. It merges each primary-key table's sorted runs (the
aggregation table's too) as Paimon's readers do.

"Together" is read the one way Paimon offers a reader outside the job: each table's
latest snapshot, one after the other (Paimon tags a snapshot, not the micro-batch that
wrote it, so there is no batch to pick as with Delta's commit metadata).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pypaimon_rust.datafusion import PaimonCatalog

from bench.pipeline.model import CUSTOMERS, EVENT_COLUMN, SCHEMAS, TABLES, latest_events
from bench.pipeline.probe import Sampler
from bench.pipeline.side import SAMPLES, probe_args, stop_event


class PaimonReader:
    def __init__(self, warehouse: str) -> None:
        self.catalog = PaimonCatalog({"warehouse": warehouse})

    def read(self, table: str, columns: list[str]) -> pa.Table:
        """``columns`` of ``table`` at its latest snapshot (merged), in the model's types."""
        builder = self.catalog.get_table(table).new_read_builder().with_projection(columns)
        splits = builder.new_scan().plan().splits()
        schema = pa.schema([SCHEMAS[table].field(c) for c in columns])
        batches = list(builder.new_read().read(splits))
        if not batches:
            return schema.empty_table()
        # the job's columns are nullable; the model's key columns are not
        return pa.Table.from_batches(batches).select(columns).cast(schema)

    def fresh(self) -> dict[str, int | None]:
        return latest_events({t: self.read(t, [EVENT_COLUMN[t]]) for t in TABLES})

    def together(self) -> tuple[dict[str, pa.Table], dict[str, Any]]:
        tables = (*TABLES, CUSTOMERS)
        return {t: self.read(t, SCHEMAS[t].names) for t in tables}, {"way": "latest"}


def main() -> None:
    ns = probe_args(__doc__)
    stop = stop_event()
    reader = PaimonReader(ns.warehouse)
    sampler = Sampler(reader.fresh, reader.together, ns.work / SAMPLES, ns.interval).start()
    stop.wait()
    sampler.stop()


if __name__ == "__main__":
    main()
