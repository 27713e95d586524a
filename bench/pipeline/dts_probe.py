"""dts's reader, in a process of its own (as the stitched side's ``delta_probe``): each
table at its latest snapshot for freshness, and the three together at the one barrier
the MetaService gives for a strong read, beside the customers they joined."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from bench.pipeline.model import CUSTOMERS, EVENT_COLUMN, TABLES, latest_events
from bench.pipeline.probe import Sampler
from bench.pipeline.side import SAMPLES, probe_args, stop_event
from bridge.consistency_read import consistent_read_tables
from filestore import Catalog


class DtsReader:
    def __init__(self, warehouse: str, meta_url: str) -> None:
        self.catalog = Catalog(warehouse)
        self.meta_url = meta_url

    def fresh(self) -> dict[str, int | None]:
        """Each table at its latest snapshot: the newest change it shows."""
        return latest_events(
            {t: self.catalog.get_table(t).read(columns=[EVENT_COLUMN[t]]) for t in TABLES}
        )

    def together(self) -> tuple[dict[str, pa.Table], dict[str, Any]]:
        """The three at the barrier of a strong read, and the customers (loaded before the
        streams started, never changed since)."""
        tables = consistent_read_tables(
            self.catalog, list(TABLES), meta_url=self.meta_url, mode="strong"
        )
        dimension = self.catalog.get_table(CUSTOMERS).read()
        return {**tables, CUSTOMERS: dimension}, {"barrier": tables.version.barrier}


def main() -> None:
    ns = probe_args(__doc__)
    stop = stop_event()
    reader = DtsReader(ns.warehouse, ns.meta_url)
    sampler = Sampler(reader.fresh, reader.together, ns.work / SAMPLES, ns.interval).start()
    stop.wait()
    sampler.stop()


if __name__ == "__main__":
    main()
