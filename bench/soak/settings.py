"""The storage lifecycle a soak runs with, all of it scaled to one retention period.

Compaction and snapshot expiration are table options the FileStore acts on after every
commit (``filestore.maintenance.table_commit``); the log's retention is the table option
``log.retention`` (its topic's ``retention.ms``). Three things have no table option:

- segments roll by the broker's ``log.roll.ms`` (Kafka deletes whole segments only, never
  the active one; the internal offsets and transaction logs, compacted, are cleaned only
  once their segments roll, and every barrier writes to both);
- Kafka checks retention every ``log.retention.check.interval.ms`` (5 min by default);
- orphan cleanup has no automatic trigger: the soak driver calls the FileStore's own
  ``Table.remove_orphans`` (what ``dts table remove-orphans`` runs) every period.

The MetaService keeps a number of completed barriers per table (``dts meta serve
--keep-barriers``), 100,000 by default: at a barrier a second, 28 hours of records, so an
hour's soak would only see its database grow towards a level it reaches the next day.
The soak keeps ``KEEP_PERIODS`` retention periods of them, reached within minutes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench.pipeline.side import DRIVER_MEMORY
from logstore.broker import JVM_OPTIONS

#: retention periods of barriers the MetaService keeps: a strong read needs only the
#: barriers its tables share, and their snapshots are gone after one period anyway
KEEP_PERIODS = 3


@dataclass(frozen=True)
class Lifecycle:
    retention_s: int

    @classmethod
    def for_run(cls, total_s: float, retention_s: int | None = None) -> Lifecycle:
        """``retention_s``, else a thirtieth of the run within 2 .. 5 min: the judged last
        two thirds of an hour then span many retention cycles (roll, expire, delete).

        Not under 2 min by default: a strong read pins the barrier both derived tables
        completed, which comes only when their micro-batches happen to end at the same
        source barrier (every ~50 s, at times 65 s, on this machine under load), and a
        pinned snapshot expired is a failed read (SnapshotNotFound)."""
        return cls(retention_s or int(min(300.0, max(120.0, total_s / 30))))

    def table_options(self) -> dict[str, str]:
        """Every table's lifecycle options (the compaction ones are the defaults, stated)."""
        return {
            "auto-compaction": "true",
            "num-sorted-run.compaction-trigger": "5",
            "snapshot.num-retained.min": "10",
            "snapshot.time-retained": f"{self.retention_s} s",
            "log.retention": f"{self.retention_s} s",
        }

    @staticmethod
    def broker_jvm_options() -> tuple[str, ...]:
        """The dev broker's options with its heap fixed and touched at start, as Kafka's
        operations guide sizes a production broker's (-Xms equal to -Xmx). Left to grow
        from 128 MB, the serial collector widened the heap at a full collection (soak run
        2: RSS +76 MB at once), and later climbed 2.6 MB a minute as promotions first
        touched the widened old generation: the RSS series measured the collector's
        sizing. The heap's own contents are the live-heap series (``jvm.py``)."""
        grown = ("-Xms128m", "-Xmx512m")
        return (*(o for o in JVM_OPTIONS if o not in grown),
                "-Xms512m", "-Xmx512m", "-XX:+AlwaysPreTouch")  # fmt: skip

    @staticmethod
    def spark_driver_jvm_options() -> str:
        """Spark's driver heap fixed and touched at start, as the broker's. Left to G1 it
        started at 1.1 GB committed of its 2 GB and widened as the streams ran (1.15 ->
        1.61 GB in the first five minutes of run 14): the Spark series' RSS grew 151-219 MB
        in runs 10-13's judged windows and failed run 13 (219 against 212), the collector's
        sizing again. What the heap holds is the live-heap series."""
        return f"-Xms{DRIVER_MEMORY} -XX:+AlwaysPreTouch"

    def broker_properties(self) -> dict[str, str]:
        check_ms = max(5, self.retention_s // 4) * 1000
        return {
            "log.roll.ms": str(self.retention_s * 1000 // 3),
            "log.retention.check.interval.ms": str(check_ms),
            # a deleted segment lingers this long as *.deleted (60 s by default)
            "log.segment.delete.delay.ms": str(check_ms),
        }

    def source_topic_config(self) -> dict[str, str]:
        """The Debezium topic of orders: the same retention as the table's log."""
        return {"cleanup.policy": "delete", "retention.ms": str(self.retention_s * 1000)}

    def keep_barriers(self, barrier_interval_s: float) -> int:
        """The MetaService's ``--keep-barriers``: ``KEEP_PERIODS`` retention periods of
        barriers, at one barrier each ``barrier_interval_s`` per table."""
        return math.ceil(KEEP_PERIODS * self.retention_s / barrier_interval_s)

    @property
    def orphan_every_s(self) -> float:
        return float(self.retention_s)

    @property
    def orphan_older_than_ms(self) -> int:
        """Files younger than this are kept: a commit in flight (a Spark micro-batch's
        files wait for its end) must never lose its files."""
        return max(60, 2 * self.retention_s) * 1000
