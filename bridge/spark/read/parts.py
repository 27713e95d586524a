"""What a driver-side planner hands the executors: the input partitions of a `dts` scan.

Small picklable objects: built on the driver (`plan_scan`, `plan_log`), read in the
executors' Python workers (`scan`, `log`). Neither side imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

if TYPE_CHECKING:
    from logstore.spec import LogSpec


@dataclass
class ReadContext:
    """What every partition of one scan shares (pickled with each partition)."""

    warehouse: str
    table: str
    columns: list[str]
    target: pa.Schema  # the Arrow form of the Spark output schema
    filter: pc.Expression | None = None


class SplitPartition(InputPartition):
    """One FileStore bucket split of a snapshot, emitted as +I rows."""

    def __init__(self, ctx: ReadContext, split: Any, barrier: int | None) -> None:
        super().__init__(None)
        self.ctx, self.split, self.barrier = ctx, split, barrier


class SplitsPartition(InputPartition):
    """Several small splits read by one task, one after the other: a Spark task and its
    Python worker round trip cost more than reading a small bucket (see `plan_scan`)."""

    def __init__(self, parts: list[SplitPartition]) -> None:
        super().__init__(None)
        self.parts = parts


class ChangesPartition(InputPartition):
    """The changes of one snapshot step (start exclusive, end inclusive)."""

    def __init__(self, ctx: ReadContext, start: int, end: int, barrier: int | None) -> None:
        super().__init__(None)
        self.ctx, self.start, self.end, self.barrier = ctx, start, end, barrier


class ChangeStepsPartition(InputPartition):
    """Consecutive snapshot steps read in order by ONE task.

    A sink gives rows sequence numbers in the order its task writes them; steps spread
    over parallel tasks could be written in any order, so an older change of a key could
    win over a newer one. One task per run of steps keeps the changelog's order.
    """

    def __init__(self, steps: list[ChangesPartition]) -> None:
        super().__init__(None)
        self.steps = steps


class ChangelogFilesPartition(InputPartition):
    """Stored changelog files of one bucket in a change range, read in snapshot order by
    one task: a key lives in one bucket, so its changes reach a sink in order while the
    buckets are read in parallel. `files` holds (snapshot's barrier, manifest entry)."""

    def __init__(self, ctx: ReadContext, files: list[tuple[int | None, Any]]) -> None:
        super().__init__(None)
        self.ctx, self.files = ctx, files


@dataclass(frozen=True)
class LogStateRef:
    """Where a log range's old rows come from (`bridge.spark.read.log_state`): the FileStore
    snapshot `snapshot_id` (None: none yet) holds the partition's log up to `offset`."""

    warehouse: str
    table: str
    snapshot_id: int | None
    offset: int


class LogPartition(InputPartition):
    """Records [start, end) of one Kafka partition and the markers inside that range;
    with `state`, read as a full changelog on top of the rows `state` names."""

    def __init__(
        self,
        bootstrap: str,
        spec: LogSpec,
        partition: int,
        start: int,
        end: int,
        markers: list[tuple[int, int]],
        target: pa.Schema,
        columns: list[str],
        state: LogStateRef | None = None,
    ) -> None:
        super().__init__(partition)
        self.bootstrap, self.spec, self.partition = bootstrap, spec, partition
        self.start, self.end, self.markers = start, end, markers
        self.target, self.columns = target, columns
        self.state = state
