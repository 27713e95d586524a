"""The batch reader of the `dts` source: planning on the driver, `read()` in the executors.

Its own module, apart from `source`: executors unpickle the reader by reference, so
this module's imports are what every task's Python worker pays for first (the sink,
the stream readers and Kafka's client are not among them).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from bridge.spark.options import ReadOptions
from bridge.spark.options.catalog import open_table, resolve_snapshot_id
from bridge.spark.read._filters import conjunction
from bridge.spark.read.plan_scan import (
    changes_partitions,
    needs_merge,
    read_context,
    split_partitions,
)
from bridge.spark.read.scan import read_partition


class DtsBatchReader(DataSourceReader):
    """A batch scan: one Spark partition per FileStore bucket split (or per changes step)."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        table = open_table(opts.common.warehouse, opts.common.table)
        self.ctx = read_context(opts, schema, table)
        self._columns = set(table.schema.arrow_schema.names)
        # pin the snapshot (or the change range) on the driver so every task reads the same
        self.changes = opts.changes if opts.feed is None else opts.feed.resolve(table)
        changing = opts.changes is not None or opts.feed is not None
        self.snapshot_id = None if changing else resolve_snapshot_id(table, opts)

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        # Used for pruning and file skipping, and all returned: Spark re-checks the rows,
        # so conservative statistics never change a result.
        self.ctx.filter = conjunction(filters, self._columns)
        return filters

    def partitions(self) -> Sequence[InputPartition]:
        table = open_table(self.opts.common.warehouse, self.opts.common.table)
        if self.opts.changes is not None or self.opts.feed is not None:
            return (
                [] if self.changes is None else changes_partitions(table, self.ctx, *self.changes)
            )
        if self.snapshot_id is None:
            return []
        if not self.opts.merge_only:
            return split_partitions(table, self.ctx, self.snapshot_id)
        scan = table.new_scan(
            snapshot_id=self.snapshot_id, filter=self.ctx.filter, columns=self.ctx.columns
        )
        merging = [s for s in scan.plan() if needs_merge(table, s)]
        return split_partitions(
            table, self.ctx, self.snapshot_id, merging, pack=True, tasks=self.opts.merge_tasks
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)
